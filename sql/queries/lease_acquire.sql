-- Lease $1 for owner $2 at time $3 for $4: taken when free or expired,
-- renewed (same token) when $2 already holds it; no row when someone else does.
INSERT INTO distlock.lease_state AS l (name, owner, token, acquired_at, renewed_at, expires_at)
VALUES ($1, $2, pg_catalog.nextval('distlock.lease_token_seq'), $3, $3, $3 OPERATOR(pg_catalog.+) $4)
ON CONFLICT (name) DO UPDATE
   SET token       = CASE WHEN l.owner OPERATOR(pg_catalog.=) excluded.owner
                           AND l.expires_at OPERATOR(pg_catalog.>) $3 THEN l.token ELSE excluded.token END,
       acquired_at = CASE WHEN l.owner OPERATOR(pg_catalog.=) excluded.owner
                           AND l.expires_at OPERATOR(pg_catalog.>) $3 THEN l.acquired_at ELSE $3 END,
       owner       = excluded.owner,
       renewed_at  = $3,
       expires_at  = excluded.expires_at
 WHERE l.owner OPERATOR(pg_catalog.=) excluded.owner OR l.expires_at OPERATOR(pg_catalog.<=) $3
RETURNING token
