-- params: interval
-- Leaderships that expired more than $1 ago (terms come from the same
-- sequence as lease tokens, so the next term is still larger).
DELETE FROM distlock.leader_state
 WHERE expires_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) $1)
