-- Node $2 campaigns in group $1 at $3 for $4: elected (a new term) when there
-- is no live leader, renewed (same term) when it is the leader; no row otherwise.
INSERT INTO distlock.leader_state AS l (group_name, leader, term, elected_at, renewed_at, expires_at)
VALUES ($1, $2, pg_catalog.nextval('distlock.lease_token_seq'), $3, $3, $3 OPERATOR(pg_catalog.+) $4)
ON CONFLICT (group_name) DO UPDATE
   SET term       = CASE WHEN l.leader OPERATOR(pg_catalog.=) excluded.leader
                          AND l.expires_at OPERATOR(pg_catalog.>) $3 THEN l.term ELSE excluded.term END,
       elected_at = CASE WHEN l.leader OPERATOR(pg_catalog.=) excluded.leader
                          AND l.expires_at OPERATOR(pg_catalog.>) $3 THEN l.elected_at ELSE $3 END,
       leader     = excluded.leader,
       renewed_at = $3,
       expires_at = excluded.expires_at
 WHERE l.leader OPERATOR(pg_catalog.=) excluded.leader OR l.expires_at OPERATOR(pg_catalog.<=) $3
RETURNING term, leader, expires_at
