-- params: text, text, timestamptz
DELETE FROM distlock.semaphore_holders
 WHERE name OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2
RETURNING expires_at OPERATOR(pg_catalog.>) $3, holder_role
