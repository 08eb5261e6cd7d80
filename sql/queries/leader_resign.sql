-- params: text, text, timestamptz
DELETE FROM distlock.leader_state
 WHERE group_name OPERATOR(pg_catalog.=) $1 AND leader OPERATOR(pg_catalog.=) $2
RETURNING expires_at OPERATOR(pg_catalog.>) $3, holder_role
