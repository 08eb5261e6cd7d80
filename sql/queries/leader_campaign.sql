-- params: text, text, timestamptz, interval, oid
-- Node $2 of role $5 campaigns in group $1 at $3 for $4: elected (a new
-- term) when there is no live leader, renewed (same term) when it is the
-- leader under the same role; no row otherwise.
-- The caller holds the transaction lock ordering grants of this group
-- (lock_keys::lock_grants_until_commit), so the nextval below is drawn after
-- every earlier grant's and a later grant always gets a larger number.
INSERT INTO distlock.leader_state AS l (group_name, leader, term, elected_at, renewed_at, expires_at, holder_role)
VALUES ($1, $2, pg_catalog.nextval('distlock.lease_token_seq'), $3, $3, $3 OPERATOR(pg_catalog.+) $4, $5)
ON CONFLICT (group_name) DO UPDATE
   SET term       = CASE WHEN l.leader OPERATOR(pg_catalog.=) excluded.leader
                          AND (l.holder_role IS NULL OR l.holder_role OPERATOR(pg_catalog.=) excluded.holder_role)
                          AND l.expires_at OPERATOR(pg_catalog.>) $3 THEN l.term ELSE excluded.term END,
       elected_at = CASE WHEN l.leader OPERATOR(pg_catalog.=) excluded.leader
                          AND (l.holder_role IS NULL OR l.holder_role OPERATOR(pg_catalog.=) excluded.holder_role)
                          AND l.expires_at OPERATOR(pg_catalog.>) $3 THEN l.elected_at ELSE $3 END,
       leader     = excluded.leader,
       renewed_at = $3,
       expires_at = excluded.expires_at,
       holder_role = excluded.holder_role
 WHERE (l.leader OPERATOR(pg_catalog.=) excluded.leader
        AND (l.holder_role IS NULL OR l.holder_role OPERATOR(pg_catalog.=) excluded.holder_role))
    OR l.expires_at OPERATOR(pg_catalog.<=) $3
RETURNING term, leader, expires_at
