-- params: text, timestamptz
DELETE FROM distlock.lease_state WHERE name OPERATOR(pg_catalog.=) $1
RETURNING expires_at OPERATOR(pg_catalog.>) $2
