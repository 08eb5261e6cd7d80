-- A new holder when fewer than $5 hold the semaphore.
INSERT INTO distlock.semaphore_holders (name, owner, acquired_at, expires_at)
SELECT $1, $2, $3, $3 OPERATOR(pg_catalog.+) $4
 WHERE (SELECT pg_catalog.count(*) FROM distlock.semaphore_holders WHERE name OPERATOR(pg_catalog.=) $1)
       OPERATOR(pg_catalog.<) $5
RETURNING true
