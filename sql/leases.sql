-- Leases, semaphores and leader election: plain rows with an owner and an
-- expiry, so they are WAL-logged, replicated, still valid after a standby
-- is promoted, and independent of the session (they work behind
-- transaction-pooling PgBouncer). Time is the database server's clock.

-- Fencing tokens and election terms: one sequence, so they strictly
-- increase and are never reused, even when rows are deleted.
CREATE SEQUENCE distlock.lease_token_seq AS bigint;

CREATE TABLE distlock.lease_state (
    name        text PRIMARY KEY,
    owner       text NOT NULL,
    token       bigint NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    -- The role that took it (an OID: rows survive a restore whatever roles exist).
    holder_role oid
);

COMMENT ON TABLE distlock.lease_state IS 'Leases (see distlock.leases).';

CREATE TABLE distlock.semaphore_state (
    name         text PRIMARY KEY,
    max_holders  int NOT NULL
);

CREATE TABLE distlock.semaphore_holders (
    name        text NOT NULL REFERENCES distlock.semaphore_state (name) ON DELETE CASCADE,
    owner       text NOT NULL,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (name, owner),
    holder_role oid
);

CREATE TABLE distlock.leader_state (
    group_name text PRIMARY KEY,
    leader     text NOT NULL,
    term       bigint NOT NULL,
    elected_at timestamptz NOT NULL,
    renewed_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL,
    holder_role oid
);

-- The scope filter stands over the union: a view that is a bare UNION ALL is
-- flattened into its branches, which loses the security barrier, and a
-- caller's cheap function would then run inside each branch before its
-- filter.
CREATE VIEW distlock.leases WITH (security_barrier) AS
SELECT u.name, u.owner, u.token, u.acquired_at, u.renewed_at, u.expires_at, u.is_held, u.remaining, u.kind
  FROM (SELECT l.name, l.owner, l.token, l.acquired_at, l.renewed_at, l.expires_at,
               l.expires_at > pg_catalog.clock_timestamp() AS is_held,
               GREATEST(l.expires_at - pg_catalog.clock_timestamp(), interval '0') AS remaining,
               'lease' AS kind
          FROM distlock.lease_state l
        UNION ALL
        SELECT h.name, h.owner, NULL, h.acquired_at, h.acquired_at, h.expires_at,
               h.expires_at > pg_catalog.clock_timestamp(),
               GREATEST(h.expires_at - pg_catalog.clock_timestamp(), interval '0'),
               'semaphore (max ' || s.max_holders || ')'
          FROM distlock.semaphore_holders h
          JOIN distlock.semaphore_state s USING (name)) u
 WHERE distlock.in_monitor_scope(u.name);

COMMENT ON VIEW distlock.leases IS 'Leases and semaphore holders, held or expired.';

CREATE VIEW distlock.leaders WITH (security_barrier) AS
SELECT l.group_name, l.leader, l.term, l.elected_at, l.renewed_at, l.expires_at,
       l.expires_at > pg_catalog.clock_timestamp() AS is_current,
       GREATEST(l.expires_at - pg_catalog.clock_timestamp(), interval '0') AS remaining
  FROM distlock.leader_state l
 WHERE distlock.in_monitor_scope(l.group_name);

COMMENT ON VIEW distlock.leaders IS 'The leader of each election group and its term.';
