-- params: text, text, timestamptz, interval, oid
UPDATE distlock.semaphore_holders SET expires_at = $3 OPERATOR(pg_catalog.+) $4
 WHERE name OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2
   AND (holder_role IS NULL OR holder_role OPERATOR(pg_catalog.=) $5)
RETURNING true
