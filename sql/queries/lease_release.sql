-- params: text, text, timestamptz
-- Deletes owner $2's row of lease $1; true when it was still held at $3.
-- The caller checks the role that took it (and errors, undoing this).
DELETE FROM distlock.lease_state
 WHERE name OPERATOR(pg_catalog.=) $1 AND owner OPERATOR(pg_catalog.=) $2
RETURNING expires_at OPERATOR(pg_catalog.>) $3, holder_role
