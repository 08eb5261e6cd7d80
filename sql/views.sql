-- Monitoring views. They read pg_locks and pg_stat_activity, so they are
-- granted to pg_monitor (see grants.sql) and show only this database's locks.
-- A role whose monitor capability is scoped sees only rows named in its
-- scope (distlock.in_monitor_scope). Every view that filters so is a
-- security barrier: without it the planner may run a cheap function of the
-- caller's (one planted in pg_temp, say, with COST 0.0000001 and a RAISE
-- NOTICE) on rows the scope filter would have removed, leaking other
-- tenants' names.

-- Which backend holds which task lock, decoded from the reserved key space
-- (objsubid 25708, which no pg_advisory_* function makes), and, as legacy,
-- the tag that 0.2.0's library used (objsubid 2), which SQL can also take.
CREATE VIEW distlock.task_lock_holders AS
SELECT l.objid::int AS task_id,
       l.pid,
       l.objsubid = 2 AS legacy
  FROM pg_catalog.pg_locks l
 WHERE l.locktype = 'advisory'
   AND l.objsubid IN (2, 25708)
   AND l.classid = distlock.task_lock_class()::oid
   AND l.granted
   AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                      WHERE d.datname = pg_catalog.current_database());

CREATE VIEW distlock.advisory_locks WITH (security_barrier) AS
SELECT l.pid,
       a.application_name,
       a.client_addr,
       a.backend_start,
       a.query,
       l.mode,
       l.granted,
       CASE l.objsubid WHEN 1 THEN 'bigint' WHEN 2 THEN 'int4_pair' ELSE 'pg_distlock' END AS key_kind,
       -- bigint form: the key given to pg_advisory_lock(bigint)
       CASE WHEN l.objsubid = 1 THEN (l.classid::bigint << 32) | l.objid::bigint END AS key,
       -- the name(s) a bigint key came from, when taken with distlock.lock(text)
       CASE WHEN l.objsubid = 1 THEN
            (SELECT pg_catalog.string_agg(DISTINCT ln.name, ' | ' ORDER BY ln.name)
               FROM distlock.lock_names ln
              WHERE ln.lock_id = ((l.classid::bigint << 32) | l.objid::bigint)
                AND distlock.in_monitor_scope(ln.name)) END AS key_name,
       -- int4 pair form: the two keys given to pg_advisory_lock(int, int),
       -- or the class and key of one of pg_distlock's own locks
       CASE WHEN l.objsubid <> 1 THEN l.classid::int END AS key1,
       CASE WHEN l.objsubid <> 1 THEN l.objid::int END AS key2,
       (l.objsubid = 25708 AND l.classid = distlock.task_lock_class()::oid) AS is_task_lock,
       t.id AS task_id,
       t.task_name,
       CASE WHEN l.granted THEN pg_catalog.now() - r.started_at END AS held_for,
       CASE WHEN NOT l.granted THEN pg_catalog.now() - l.waitstart END AS waiting_for
  FROM pg_catalog.pg_locks l
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
  LEFT JOIN distlock.scheduled_tasks t
         ON l.objsubid = 25708
        AND l.classid = distlock.task_lock_class()::oid
        AND t.id = l.objid::int
  LEFT JOIN distlock.task_execution_log r
         ON r.task_id = t.id
        AND r.status = 'running'
        AND r.holder_pid = l.pid
        AND l.granted
 WHERE l.locktype = 'advisory'
   AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                      WHERE d.datname = pg_catalog.current_database())
   -- A session claim's own lock (objsubid 25709, classid the task id) only
   -- names the claim for fencing checks: the task lock shows the claim.
   AND l.objsubid <> 25709
   -- A claim also holds its task's legacy tag; shown once, as the task lock.
   AND NOT (l.objsubid = 2 AND l.classid = distlock.task_lock_class()::oid
            AND EXISTS (SELECT 1 FROM distlock.task_lock_holders h
                         WHERE h.pid = l.pid AND h.task_id = l.objid::int AND NOT h.legacy))
   AND (distlock.in_monitor_scope(t.task_name, t.task_type)
        OR (l.objsubid = 1
            AND EXISTS (SELECT 1 FROM distlock.lock_names ln
                         WHERE ln.lock_id = ((l.classid::bigint << 32) | l.objid::bigint)
                           AND distlock.in_monitor_scope(ln.name))));

COMMENT ON VIEW distlock.advisory_locks IS
    'Every advisory lock of this database, decoded; held_for is known for task locks only.';

-- The owner backend p_pid published (distlock.lock_owner_published: NULL
-- when it has none, or its name is outside the caller's monitor scope).
-- STABLE, so that a count over lock_waits skips it. lock_waits calls it
-- through this wrapper so that a session
-- still running an older release's library, which lacks that C function,
-- reads the view with NULL here (as lease_backend_alive below).
CREATE FUNCTION distlock.lock_owner(p_pid integer) RETURNS text
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN distlock.lock_owner_published(p_pid);
EXCEPTION WHEN undefined_function THEN
    RETURN NULL;
END
$$;

CREATE VIEW distlock.lock_waits WITH (security_barrier) AS
SELECT w.pid AS blocked_pid,
       w.application_name AS blocked_application,
       w.query AS blocked_query,
       b.pid AS blocking_pid,
       b.application_name AS blocking_application,
       b.query AS blocking_query,
       wl.locktype,
       al.key_kind,
       al.key,
       al.key1,
       al.key2,
       al.task_name,
       pg_catalog.now() - wl.waitstart AS waiting_for,
       -- Each side's distlock.owner: connections of one owner are one node
       -- of the owner-level graph, whose cycles pg_distlock breaks (40P01).
       distlock.lock_owner(w.pid) AS blocked_owner,
       distlock.lock_owner(b.pid) AS blocking_owner
  FROM pg_catalog.pg_stat_activity w
 CROSS JOIN LATERAL pg_catalog.unnest(pg_catalog.pg_blocking_pids(w.pid)) AS bp(pid)
  JOIN pg_catalog.pg_stat_activity b ON b.pid = bp.pid
  LEFT JOIN LATERAL (
        SELECT l.locktype, l.waitstart
          FROM pg_catalog.pg_locks l
         WHERE l.pid = w.pid AND NOT l.granted
         LIMIT 1) wl ON true
  LEFT JOIN distlock.advisory_locks al ON al.pid = w.pid AND NOT al.granted
 WHERE w.wait_event_type = 'Lock'
   -- This database's sessions only, as every view here (before 0.4.0 an
   -- unscoped reader saw the other databases' waits too).
   AND w.datid = (SELECT d.oid FROM pg_catalog.pg_database d
                   WHERE d.datname = pg_catalog.current_database())
   -- A wait for a lock the reader's scope does not show is not shown.
   AND (al.pid IS NOT NULL OR distlock.in_monitor_scope(NULL));

COMMENT ON VIEW distlock.lock_waits IS
    'Who waits for whom (pg_blocking_pids), with the advisory key and task when there is one, and each side''s lock owner (distlock.owner).';

-- Whether the backend holding task p_task_id's lease-mode claim is still
-- connected (distlock.lease_backend_connected, in the caller's monitor
-- scope). running_tasks calls it through this wrapper so that a session
-- still running an older release's library after ALTER EXTENSION ... UPDATE,
-- which lacks that C function, reads the view with NULL here instead of
-- failing to read it (such sessions may read, see docs/upgrading.md).
CREATE FUNCTION distlock.lease_backend_alive(p_task_id integer) RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN distlock.lease_backend_connected(p_task_id);
EXCEPTION WHEN undefined_function THEN
    RETURN NULL;
END
$$;

CREATE VIEW distlock.running_tasks WITH (security_barrier) AS
SELECT r.id AS log_id,
       r.task_id,
       t.task_name,
       r.worker_id,
       r.fencing_token,
       r.attempt,
       r.started_at,
       pg_catalog.now() - r.started_at AS running_for,
       r.holder_pid,
       r.holder_backend_start,
       -- Alive: this claim is the task's current one and its backend still
       -- holds the task lock (a dead or restarted backend holds nothing), or,
       -- for a lease-mode claim (no holder backend), its lease has not run out.
       (r.fencing_token IS NOT DISTINCT FROM t.current_token
        AND CASE WHEN r.holder_pid IS NULL THEN t.lease_expires_at > pg_catalog.clock_timestamp()
                 ELSE EXISTS (SELECT 1 FROM distlock.task_lock_holders h
                               WHERE h.task_id = r.task_id AND h.pid = r.holder_pid) END) AS holder_alive,
       t.timeout,
       (t.timeout IS NOT NULL AND pg_catalog.now() - r.started_at > t.timeout) AS past_timeout,
       CASE WHEN r.fencing_token IS NOT DISTINCT FROM t.current_token THEN t.lease_expires_at END AS lease_expires_at,
       -- A lease-mode claim that is the task's current one: whether the
       -- backend that made it or last renewed it is still connected (a
       -- worker killed with its claim reads false while its lease runs on).
       -- NULL when that backend is unknown (a claim made before 0.4.0) and
       -- on a standby.
       CASE WHEN r.holder_pid IS NULL AND r.fencing_token IS NOT DISTINCT FROM t.current_token
            THEN distlock.lease_backend_alive(t.id) END AS lease_backend_alive
  FROM distlock.task_execution_log r
  JOIN distlock.scheduled_tasks t ON t.id = r.task_id
 WHERE r.status = 'running'
   AND distlock.in_monitor_scope(t.task_name, t.task_type);

COMMENT ON VIEW distlock.running_tasks IS
    'Running claims, whether their holder (backend, or lease for a lease-mode claim) is alive, whether a lease-mode claim''s backend is still connected, and whether they are past their timeout.';

CREATE VIEW distlock.task_stats WITH (security_barrier) AS
SELECT t.id AS task_id,
       t.task_name,
       t.task_type,
       t.is_enabled,
       -- A skipped slot (0.4.0) is logged but is not a run.
       count(l.id) FILTER (WHERE l.status <> 'skipped') AS runs,
       count(l.id) FILTER (WHERE l.status = 'running') AS running,
       count(l.id) FILTER (WHERE l.status = 'completed') AS completed,
       count(l.id) FILTER (WHERE l.status = 'failed') AS failed,
       count(l.id) FILTER (WHERE l.status = 'timed_out') AS timed_out,
       count(l.id) FILTER (WHERE l.status = 'abandoned') AS abandoned,
       avg(l.completed_at - l.started_at) FILTER (WHERE l.status = 'completed') AS avg_duration,
       max(l.completed_at - l.started_at) FILTER (WHERE l.status = 'completed') AS max_duration,
       t.last_status,
       t.last_run_at,
       t.next_run_at,
       count(l.id) FILTER (WHERE l.status = 'skipped') AS skipped
  FROM distlock.scheduled_tasks t
  LEFT JOIN distlock.task_execution_log l ON l.task_id = t.id
 WHERE distlock.in_monitor_scope(t.task_name, t.task_type)
 GROUP BY t.id;

COMMENT ON VIEW distlock.task_stats IS
    'Per task: runs by outcome, durations of completed runs, and its schedule.';

-- Every scheduled task as it stands, without its runs: cheap at any number
-- of tasks, where task_stats counts each task's whole log.
CREATE VIEW distlock.task_schedule WITH (security_barrier) AS
SELECT t.id AS task_id,
       t.task_name,
       t.task_type,
       t.schedule_cron,
       t.is_enabled,
       t.next_run_at,
       t.last_run_at,
       t.last_status,
       t.consecutive_failures,
       t.timeout,
       t.current_token IS NOT NULL AS is_running,
       t.runs_completed,
       t.runs_failed,
       t.runs_timed_out,
       t.runs_abandoned,
       -- The zone its schedule follows (0.4.0): its own, or the setting's.
       COALESCE(t.schedule_timezone, pg_catalog.current_setting('distlock.timezone', true), 'UTC') AS schedule_timezone,
       -- What a fetch does with missed slots, and how many it skipped (0.4.0).
       t.missed_runs,
       t.missed_runs_grace,
       t.missed_runs_max,
       t.runs_skipped
  FROM distlock.scheduled_tasks t
 WHERE distlock.in_monitor_scope(t.task_name, t.task_type);

COMMENT ON VIEW distlock.task_schedule IS
    'Scheduled tasks with their schedule, next and last run and last status, without counting their runs.';

-- Task locks held with no committed running claim behind them: a claim made
-- in a transaction that has not committed (its log row is invisible). The
-- task is not claimed while the lock is held; the sweep ends the holder once
-- its transaction is older than the task's timeout. (A session holding the
-- legacy key from SQL, pg_advisory_lock(distlock.task_lock_class(), task_id),
-- blocks nothing and is not listed.)
CREATE VIEW distlock.blocked_tasks WITH (security_barrier) AS
SELECT h.task_id,
       t.task_name,
       h.pid,
       a.usename,
       a.application_name,
       a.client_addr,
       a.backend_start,
       a.state,
       a.xact_start,
       pg_catalog.now() - a.xact_start AS in_transaction_for,
       t.timeout,
       a.query
  FROM distlock.task_lock_holders h
  JOIN distlock.scheduled_tasks t ON t.id = h.task_id
  LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid = h.pid
 WHERE NOT h.legacy
   AND NOT EXISTS (SELECT 1 FROM distlock.task_execution_log r
                    WHERE r.task_id = h.task_id
                      AND r.status = 'running'
                      AND r.holder_pid = h.pid)
   AND distlock.in_monitor_scope(t.task_name, t.task_type);

COMMENT ON VIEW distlock.blocked_tasks IS
    'Task locks held without a committed running claim (a claim in a transaction that has not committed).';
