-- params: text, timestamptz
DELETE FROM distlock.semaphore_holders
 WHERE name OPERATOR(pg_catalog.=) $1 AND expires_at OPERATOR(pg_catalog.<=) $2
