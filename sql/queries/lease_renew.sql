-- params: text, text, timestamptz, interval
UPDATE distlock.lease_state
   SET renewed_at = $3, expires_at = $3 OPERATOR(pg_catalog.+) $4
 WHERE name OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2
   AND expires_at OPERATOR(pg_catalog.>) $3
RETURNING true, holder_role
