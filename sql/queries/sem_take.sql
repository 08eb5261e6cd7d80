-- A new holder when fewer than $5 hold the semaphore.
INSERT INTO distlock.semaphore_holders (name, owner, acquired_at, expires_at)
SELECT $1, $2, $3, $3 + $4
 WHERE (SELECT count(*) FROM distlock.semaphore_holders WHERE name = $1) < $5
RETURNING true
