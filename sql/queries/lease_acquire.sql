-- params: text, text, timestamptz, interval, oid
-- Lease $1 for owner $2 of role $5 at time $3 for $4: taken when free or
-- expired, renewed (same token) when $2 of the same role already holds it
-- (a hold from before roles were recorded counts as the same role); no row
-- when someone else does.
-- The caller holds the transaction lock ordering grants of this name
-- (lock_keys::lock_grants_until_commit), so the nextval below is drawn after
-- every earlier grant's and a later grant always gets a larger number.
INSERT INTO distlock.lease_state AS l (name, owner, token, acquired_at, renewed_at, expires_at, holder_role)
VALUES ($1, $2, pg_catalog.nextval('distlock.lease_token_seq'), $3, $3, $3 OPERATOR(pg_catalog.+) $4, $5)
ON CONFLICT (name) DO UPDATE
   SET token       = CASE WHEN l.owner OPERATOR(pg_catalog.=) excluded.owner
                           AND (l.holder_role IS NULL OR l.holder_role OPERATOR(pg_catalog.=) excluded.holder_role)
                           AND l.expires_at OPERATOR(pg_catalog.>) $3 THEN l.token ELSE excluded.token END,
       acquired_at = CASE WHEN l.owner OPERATOR(pg_catalog.=) excluded.owner
                           AND (l.holder_role IS NULL OR l.holder_role OPERATOR(pg_catalog.=) excluded.holder_role)
                           AND l.expires_at OPERATOR(pg_catalog.>) $3 THEN l.acquired_at ELSE $3 END,
       owner       = excluded.owner,
       renewed_at  = $3,
       expires_at  = excluded.expires_at,
       holder_role = excluded.holder_role
 WHERE (l.owner OPERATOR(pg_catalog.=) excluded.owner
        AND (l.holder_role IS NULL OR l.holder_role OPERATOR(pg_catalog.=) excluded.holder_role))
    OR l.expires_at OPERATOR(pg_catalog.<=) $3
RETURNING token
