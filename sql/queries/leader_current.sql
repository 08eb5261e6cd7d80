-- params: text
SELECT term, leader, expires_at FROM distlock.leader_state WHERE group_name OPERATOR(pg_catalog.=) $1
