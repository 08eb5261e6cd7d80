-- params: interval
-- Semaphore slots that expired more than $1 ago.
DELETE FROM distlock.semaphore_holders
 WHERE expires_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) $1)
