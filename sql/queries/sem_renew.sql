UPDATE distlock.semaphore_holders SET expires_at = $3 OPERATOR(pg_catalog.+) $4
 WHERE name OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2
RETURNING true
