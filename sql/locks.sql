-- Lock calls (distlock.lock / try_lock): the key -> name memory and the
-- telemetry views.

-- Every text key used through pg_distlock, with the name it came from.
-- No unique constraint: recording a name must never wait for another
-- session's uncommitted insert of the same one (see src/locks/names.rs);
-- the views fold the rare duplicate.
CREATE TABLE distlock.lock_names (
    lock_id    bigint NOT NULL,
    name       text NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX lock_names_lock_id_idx ON distlock.lock_names (lock_id, name);

COMMENT ON TABLE distlock.lock_names IS
    'Names of the text keys given to distlock.lock/try_lock: lock_id = distlock.lock_id(name).';

-- Two different names that hash to one key share one lock.
CREATE VIEW distlock.lock_key_collisions WITH (security_barrier) AS
SELECT n.lock_id,
       pg_catalog.array_agg(DISTINCT n.name ORDER BY n.name) AS names,
       pg_catalog.min(n.first_seen) AS first_seen
  FROM distlock.lock_names n
 WHERE distlock.in_monitor_scope(n.name)
 GROUP BY n.lock_id
HAVING pg_catalog.count(DISTINCT n.name) > 1;

COMMENT ON VIEW distlock.lock_key_collisions IS
    'Lock keys that two or more names hash to (distlock.lock_id): those names share one lock.';

-- Per-key telemetry of lock calls (shared memory; needs preload).
-- longest_current_hold is shown only while pg_locks confirms the key is
-- held, so a lock dropped behind pg_distlock's back (pg_advisory_unlock_all)
-- does not look held forever.
CREATE VIEW distlock.lock_stats WITH (security_barrier) AS
WITH held AS (
    SELECT DISTINCT (l.classid::bigint << 32) | l.objid::bigint AS key
      FROM pg_catalog.pg_locks l
     WHERE l.locktype = 'advisory'
       AND l.objsubid = 1
       AND l.granted
       AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                          WHERE d.datname = pg_catalog.current_database())
)
SELECT s.key,
       n.name,
       COALESCE(n.names > 1, false) AS name_collision,
       s.acquisitions,
       s.failed_tries,
       s.timeouts,
       s.waits,
       s.total_wait,
       s.max_wait,
       CASE WHEN s.waits + s.timeouts > 0
            THEN s.total_wait / (s.waits + s.timeouts)::float8 END AS mean_wait,
       CASE WHEN h.key IS NOT NULL THEN s.holders ELSE 0 END AS current_holders,
       CASE WHEN h.key IS NOT NULL THEN s.held_for END AS longest_current_hold,
       s.last_used
  FROM distlock.lock_stats_entries() s
  LEFT JOIN held h ON h.key = s.key AND s.holders > 0
  LEFT JOIN LATERAL (
        SELECT pg_catalog.string_agg(DISTINCT ln.name, ' | ' ORDER BY ln.name) AS name,
               pg_catalog.count(DISTINCT ln.name) AS names
          FROM distlock.lock_names ln
         WHERE ln.lock_id = s.key
           AND distlock.in_monitor_scope(ln.name)) n ON true
 WHERE distlock.in_monitor_scope(n.name);

COMMENT ON VIEW distlock.lock_stats IS
    'Per-key telemetry of distlock.lock/try_lock since startup or distlock.reset_lock_stats(); needs pg_distlock in shared_preload_libraries.';
