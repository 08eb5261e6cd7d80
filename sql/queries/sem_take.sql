-- params: text, text, timestamptz, interval, bigint, oid
-- A new holder (owner $2 of role $6) when fewer than $5 hold the semaphore;
-- no row when $2 is taken by another role.
INSERT INTO distlock.semaphore_holders (name, owner, acquired_at, expires_at, holder_role)
SELECT $1, $2, $3, $3 OPERATOR(pg_catalog.+) $4, $6
 WHERE (SELECT pg_catalog.count(*) FROM distlock.semaphore_holders WHERE name OPERATOR(pg_catalog.=) $1)
       OPERATOR(pg_catalog.<) $5
ON CONFLICT (name, owner) DO NOTHING
RETURNING true
