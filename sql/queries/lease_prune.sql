-- params: interval
-- Leases that expired more than $1 ago. Tokens come from a sequence, so the
-- next holder of the name still gets a larger one. A lease renewed
-- concurrently is re-checked after its row lock and kept.
DELETE FROM distlock.lease_state
 WHERE expires_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) $1)
