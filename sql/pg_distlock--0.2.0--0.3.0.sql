-- pg_distlock 0.2.0 -> 0.3.0, run by ALTER EXTENSION pg_distlock UPDATE.
-- Every schema or grant change since 0.2.0 is here as well as in the install
-- script that sql/*.sql and src/ generate; tests/cluster/upgrade.rs walks
-- 0.1.0 -> 0.2.0 -> 0.3.0 and checks that the result equals a fresh 0.3.0
-- install (tests/cluster/schema_fingerprint.sql) and keeps its data.
\echo Use "ALTER EXTENSION pg_distlock UPDATE TO '0.3.0'" to load this file. \quit

-- Admins define tasks but never write a token: INSERT on scheduled_tasks
-- becomes a column list without current_token and lease_expires_at (a
-- table-wide INSERT let an admin insert a row with a token of its choosing,
-- which check_fencing_token then accepted).
CREATE OR REPLACE FUNCTION distlock.capability_privileges(p_capability text)
RETURNS TABLE (privilege text, object text)
LANGUAGE plpgsql IMMUTABLE STRICT
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_capability OPERATOR(pg_catalog.<>) ALL (ARRAY['worker', 'producer', 'consumer', 'monitor', 'admin']) THEN
        RAISE EXCEPTION 'unknown capability "%"', p_capability
            USING ERRCODE = '22023', HINT = 'One of worker, producer, consumer, monitor, admin.';
    END IF;
    RETURN QUERY
SELECT g.privilege, g.object FROM (VALUES
    -- Pure helpers, for everyone with a capability.
    ('any',      'USAGE',   'SCHEMA distlock'),
    ('any',      'EXECUTE', 'FUNCTION distlock.lock_id(text)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.get_task_lock_id(text)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.task_lock_class()'),
    ('any',      'EXECUTE', 'FUNCTION distlock.cron_next(text, timestamptz)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.snowflake_timestamp(bigint)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.snowflake_worker_id(bigint)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.snowflake_sequence(bigint)'),
    ('any',      'EXECUTE', 'FUNCTION distlock.in_monitor_scope(text, text)'),
    -- Scheduled tasks and the coordination primitives a service uses.
    ('worker',   'EXECUTE', 'FUNCTION distlock.worker_fetch_and_execute_task(text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_acquire_multiple_tasks(text, integer)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_acquire_task_lock(integer, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_task_lock(integer, text, text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.check_fencing_token(integer, bigint)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.worker_fetch_and_execute_task(text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_acquire_multiple_tasks(text, integer, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_acquire_task_lease(integer, text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.renew_task_lease(integer, bigint, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_task_lease(integer, bigint, text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_and_fetch_task(integer, text, text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_and_fetch_task(integer, bigint, text, text, interval, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.lock(bigint, interval, boolean, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.lock(text, interval, boolean, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_lock(bigint, boolean, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_lock(text, boolean, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.unlock(bigint, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.unlock(text, boolean)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.unlock_all()'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.acquire_lease(text, text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.renew_lease(text, text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_lease(text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.check_lease_token(text, bigint)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.acquire_semaphore(text, integer, text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.release_semaphore(text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.try_become_leader(text, text, interval)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.resign_leader(text, text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.check_rate_limit(text, integer, integer)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.throttle(text, integer, integer, double precision, integer)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.rate_limit_status(text)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.generate_snowflake_id(integer)'),
    ('worker',   'EXECUTE', 'FUNCTION distlock.bump_version()'),
    -- The job queue.
    ('producer', 'EXECUTE', 'FUNCTION distlock.enqueue_task(text, jsonb, timestamptz, integer, integer, text, text)'),
    ('producer', 'EXECUTE', 'FUNCTION distlock.enqueue_tasks(text, jsonb[], timestamptz, integer, integer, text)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.consume_task(text, interval, interval, text[])'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.consume_tasks(integer, text, interval, interval, text[])'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.complete_tasks(bigint[], text, integer[])'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.settle_and_consume_tasks(integer, text, bigint[], integer[], bigint[], integer[], text[], interval, interval, text[])'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.complete_task(bigint, text)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.complete_task(bigint, text, integer)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.fail_task(bigint, text, text)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.fail_task(bigint, text, text, integer)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.extend_task_lease(bigint, interval, text)'),
    ('consumer', 'EXECUTE', 'FUNCTION distlock.extend_task_lease(bigint, interval, text, integer)'),
    -- The monitoring views (what pg_monitor is granted).
    ('monitor',  'SELECT',  'distlock.advisory_locks, distlock.lock_waits, distlock.running_tasks, '
                            'distlock.task_stats, distlock.queue_stats, distlock.queues, distlock.queue_throughput, '
                            'distlock.queue_latency, distlock.queue_wait_histogram, distlock.leases, distlock.leaders, '
                            'distlock.lock_stats, distlock.lock_key_collisions, distlock.blocked_tasks, distlock.sweep_status, '
                            'distlock.task_schedule'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.lock_stats_entries()'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.queue_wait_stats()'),
    -- Recovery, retention and resets; defining tasks.
    ('admin',    'EXECUTE', 'FUNCTION distlock.check_and_recover_timeout_tasks(integer)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.force_release_lease(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.pause_queue(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.resume_queue(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.set_queue_limit(text, integer)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_rate_limit(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_lock_stats()'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_execution_log(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_jobs(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.retry_dead_jobs(text, bigint[])'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.delete_dead_jobs(text, bigint[])'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_leases(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_lock_names(interval)'),
    ('admin',    'SELECT, DELETE', 'distlock.scheduled_tasks'),
    ('admin',    'INSERT (id, task_name, task_type, schedule_cron, is_enabled, next_run_at, timeout, '
                 'max_retries, retry_delay)', 'distlock.scheduled_tasks'),
    ('admin',    'UPDATE (task_name, task_type, schedule_cron, is_enabled, next_run_at, timeout, '
                 'max_retries, retry_delay, consecutive_failures)', 'distlock.scheduled_tasks'),
    ('admin',    'USAGE',   'SEQUENCE distlock.scheduled_tasks_id_seq'),
    ('admin',    'SELECT',  'distlock.task_execution_log, distlock.task_queue, distlock.completed_jobs, distlock.jobs')
) AS g (capability, privilege, object)
WHERE g.capability OPERATOR(pg_catalog.=) ANY (
    CASE p_capability
        WHEN 'admin' THEN ARRAY['any', 'worker', 'producer', 'consumer', 'monitor', 'admin']
        ELSE ARRAY['any', p_capability]
    END);
END
$$;

-- Scoped capabilities: grant_capability takes a scope, a name prefix the
-- capability is limited to (src/scopes.rs). Backends keep the scopes they
-- look up and forget them when role_capabilities changes (its trigger).
ALTER TABLE distlock.role_capabilities ADD COLUMN scope text;
ALTER TABLE distlock.role_capabilities ADD CONSTRAINT role_capabilities_scope_valid CHECK (
        scope IS NULL OR (scope <> '' AND capability <> 'admin'));

CREATE FUNCTION distlock."role_capabilities_changed"()
	RETURNS TRIGGER
	LANGUAGE c
	AS 'MODULE_PATHNAME', 'role_capabilities_changed_wrapper';
REVOKE ALL ON FUNCTION distlock.role_capabilities_changed() FROM PUBLIC;

CREATE TRIGGER role_capabilities_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.role_capabilities
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.role_capabilities_changed();

CREATE FUNCTION distlock."in_monitor_scope"(
	"p_name" TEXT, /* Option < Text > */
	"p_other_name" TEXT DEFAULT NULL /* Option < Text > */
) RETURNS bool /* bool */
STABLE PARALLEL RESTRICTED
LANGUAGE c /* Rust */
AS 'MODULE_PATHNAME', 'in_monitor_scope_wrapper';
REVOKE ALL ON FUNCTION distlock.in_monitor_scope(text, text) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION distlock.in_monitor_scope(text, text) TO pg_monitor;

DROP FUNCTION distlock.grant_capability(regrole, text);

-- Gives p_role a capability: records it (admin is what lets a role act on
-- other roles' holds) and grants its privileges. With p_scope, the role may
-- use the capability only on names that start with p_scope (see
-- src/scopes.rs); a role has one scope per capability, and granting again
-- replaces it (NULL: every name). Only the extension's owner (or a
-- superuser) can run it.
CREATE FUNCTION distlock.grant_capability(p_role regrole, p_capability text, p_scope text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g record;
BEGIN
    IF p_role IS NULL OR p_capability IS NULL THEN
        RAISE EXCEPTION 'p_role and p_capability must not be NULL' USING ERRCODE = '22004';
    END IF;
    IF p_scope OPERATOR(pg_catalog.=) '' THEN
        RAISE EXCEPTION 'p_scope must not be empty' USING ERRCODE = '22023',
            HINT = 'Pass NULL for a capability on every name.';
    END IF;
    IF p_scope IS NOT NULL AND p_capability OPERATOR(pg_catalog.=) 'admin' THEN
        RAISE EXCEPTION 'the admin capability cannot be scoped (p_scope "%")', p_scope USING ERRCODE = '22023',
            HINT = 'Grant worker, producer, consumer or monitor with a scope instead.';
    END IF;
    FOR g IN SELECT * FROM distlock.capability_privileges(p_capability) LOOP
        EXECUTE pg_catalog.format('GRANT %s ON %s TO %s', g.privilege, g.object, p_role);
    END LOOP;
    INSERT INTO distlock.role_capabilities AS c (role, capability, scope) VALUES (p_role, p_capability, p_scope)
    ON CONFLICT (role, capability) DO UPDATE SET scope = EXCLUDED.scope
     WHERE c.scope IS DISTINCT FROM EXCLUDED.scope;
END
$$;

REVOKE ALL ON FUNCTION distlock.grant_capability(regrole, text, text) FROM PUBLIC;

-- Takes a capability away: revokes its privileges, then grants again what
-- the role's remaining capabilities include.
CREATE OR REPLACE FUNCTION distlock.revoke_capability(p_role regrole, p_capability text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    g record;
    kept record;
BEGIN
    IF p_role IS NULL OR p_capability IS NULL THEN
        RAISE EXCEPTION 'p_role and p_capability must not be NULL' USING ERRCODE = '22004';
    END IF;
    DELETE FROM distlock.role_capabilities c
     WHERE c.role OPERATOR(pg_catalog.=) p_role AND c.capability OPERATOR(pg_catalog.=) p_capability;
    FOR g IN SELECT * FROM distlock.capability_privileges(p_capability) LOOP
        EXECUTE pg_catalog.format('REVOKE %s ON %s FROM %s',
                                  pg_catalog.split_part(g.privilege, ' (', 1), g.object, p_role);
    END LOOP;
    FOR kept IN SELECT c.capability, c.scope FROM distlock.role_capabilities c
                 WHERE c.role OPERATOR(pg_catalog.=) p_role LOOP
        PERFORM distlock.grant_capability(p_role, kept.capability, kept.scope);
    END LOOP;
END
$$;

-- The monitoring views show a scoped monitor only the rows of its scope.
CREATE OR REPLACE VIEW distlock.lock_waits AS
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
       pg_catalog.now() - wl.waitstart AS waiting_for
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
   -- A wait for a lock the reader's scope does not show is not shown.
   AND (al.pid IS NOT NULL OR distlock.in_monitor_scope(NULL));

CREATE OR REPLACE VIEW distlock.task_stats AS
SELECT t.id AS task_id,
       t.task_name,
       t.task_type,
       t.is_enabled,
       count(l.id) AS runs,
       count(l.id) FILTER (WHERE l.status = 'running') AS running,
       count(l.id) FILTER (WHERE l.status = 'completed') AS completed,
       count(l.id) FILTER (WHERE l.status = 'failed') AS failed,
       count(l.id) FILTER (WHERE l.status = 'timed_out') AS timed_out,
       count(l.id) FILTER (WHERE l.status = 'abandoned') AS abandoned,
       avg(l.completed_at - l.started_at) FILTER (WHERE l.status = 'completed') AS avg_duration,
       max(l.completed_at - l.started_at) FILTER (WHERE l.status = 'completed') AS max_duration,
       t.last_status,
       t.last_run_at,
       t.next_run_at
  FROM distlock.scheduled_tasks t
  LEFT JOIN distlock.task_execution_log l ON l.task_id = t.id
 WHERE distlock.in_monitor_scope(t.task_name, t.task_type)
 GROUP BY t.id;

CREATE OR REPLACE VIEW distlock.leases AS
SELECT l.name, l.owner, l.token, l.acquired_at, l.renewed_at, l.expires_at,
       l.expires_at > pg_catalog.clock_timestamp() AS is_held,
       GREATEST(l.expires_at - pg_catalog.clock_timestamp(), interval '0') AS remaining,
       'lease' AS kind
  FROM distlock.lease_state l
 WHERE distlock.in_monitor_scope(l.name)
UNION ALL
SELECT h.name, h.owner, NULL, h.acquired_at, h.acquired_at, h.expires_at,
       h.expires_at > pg_catalog.clock_timestamp(),
       GREATEST(h.expires_at - pg_catalog.clock_timestamp(), interval '0'),
       'semaphore (max ' || s.max_holders || ')'
  FROM distlock.semaphore_holders h
  JOIN distlock.semaphore_state s USING (name)
 WHERE distlock.in_monitor_scope(h.name);

CREATE OR REPLACE VIEW distlock.leaders AS
SELECT l.group_name, l.leader, l.term, l.elected_at, l.renewed_at, l.expires_at,
       l.expires_at > pg_catalog.clock_timestamp() AS is_current,
       GREATEST(l.expires_at - pg_catalog.clock_timestamp(), interval '0') AS remaining
  FROM distlock.leader_state l
 WHERE distlock.in_monitor_scope(l.group_name);

CREATE OR REPLACE VIEW distlock.lock_key_collisions AS
SELECT n.lock_id,
       pg_catalog.array_agg(DISTINCT n.name ORDER BY n.name) AS names,
       pg_catalog.min(n.first_seen) AS first_seen
  FROM distlock.lock_names n
 WHERE distlock.in_monitor_scope(n.name)
 GROUP BY n.lock_id
HAVING pg_catalog.count(DISTINCT n.name) > 1;

CREATE OR REPLACE VIEW distlock.lock_stats AS
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

-- Task locks move to a lock tag no SQL function makes (objsubid 25708): a
-- session could hold pg_advisory_lock(distlock.task_lock_class(), id) and
-- block a task for good. The legacy tag stays visible (claims of a 0.2.0
-- library still running in an old session hold it), without showing twice.
CREATE OR REPLACE VIEW distlock.task_lock_holders AS
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

CREATE OR REPLACE VIEW distlock.advisory_locks AS
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
   -- A claim also holds its task's legacy tag; shown once, as the task lock.
   AND NOT (l.objsubid = 2 AND l.classid = distlock.task_lock_class()::oid
            AND EXISTS (SELECT 1 FROM distlock.task_lock_holders h
                         WHERE h.pid = l.pid AND h.task_id = l.objid::int AND NOT h.legacy))
   AND (distlock.in_monitor_scope(t.task_name, t.task_type)
        OR (l.objsubid = 1
            AND EXISTS (SELECT 1 FROM distlock.lock_names ln
                         WHERE ln.lock_id = ((l.classid::bigint << 32) | l.objid::bigint)
                           AND distlock.in_monitor_scope(ln.name))));

CREATE OR REPLACE VIEW distlock.running_tasks AS
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
       CASE WHEN r.fencing_token IS NOT DISTINCT FROM t.current_token THEN t.lease_expires_at END AS lease_expires_at
  FROM distlock.task_execution_log r
  JOIN distlock.scheduled_tasks t ON t.id = r.task_id
 WHERE r.status = 'running'
   AND distlock.in_monitor_scope(t.task_name, t.task_type);

CREATE OR REPLACE VIEW distlock.blocked_tasks AS
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

-- Jobs record the role that enqueued them (NULL for jobs already queued).
ALTER TABLE distlock.task_queue ADD COLUMN producer_role oid;

-- Queues: every job belongs to one, the jobs already queued to 'default';
-- producers name it, consumers the queues they take from. The functions
-- keep their names and gain a last parameter with a default, so calls keep
-- working; the C functions of 0.2.0's signatures stay in the library
-- (src/compat/v0_2_0.rs) for sessions between library and update.
ALTER TABLE distlock.task_queue ADD COLUMN queue text NOT NULL DEFAULT 'default';
CREATE INDEX task_queue_queue_runnable_idx
    ON distlock.task_queue (queue, priority DESC, run_after, id)
    WHERE status IN ('pending', 'failed');

-- When the next job scheduled for later comes due, for consumers about to wait.
CREATE INDEX task_queue_due_idx
    ON distlock.task_queue (run_after)
    WHERE status IN ('pending', 'failed') AND run_after > created_at;

-- Unique jobs (enqueue_task's p_unique_key): one unfinished job per key and queue.
ALTER TABLE distlock.task_queue ADD COLUMN unique_key text;
CREATE UNIQUE INDEX task_queue_unique_key_idx
    ON distlock.task_queue (queue, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('pending', 'failed', 'processing');

DROP FUNCTION distlock.enqueue_task(text, jsonb, timestamptz, integer, integer);
CREATE FUNCTION distlock.enqueue_task(
    "p_task_name" TEXT,
    "p_payload" jsonb DEFAULT '{}',
    "p_run_after" timestamp with time zone DEFAULT now(),
    "p_priority" INT DEFAULT 0,
    "p_max_attempts" INT DEFAULT 5,
    "p_queue" TEXT DEFAULT 'default',
    "p_unique_key" TEXT DEFAULT NULL
) RETURNS bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'enqueue_task_in_queue_wrapper';
REVOKE ALL ON FUNCTION distlock.enqueue_task(text, jsonb, timestamptz, integer, integer, text, text) FROM PUBLIC;

DROP FUNCTION distlock.consume_task(text, interval, interval);
CREATE FUNCTION distlock.consume_task(
    "p_worker_id" TEXT DEFAULT NULL,
    "p_lease" interval DEFAULT '5 minutes',
    "p_wait" interval DEFAULT NULL,
    "p_queues" TEXT[] DEFAULT NULL
) RETURNS TABLE (
    "task_id" bigint,
    "task_name" TEXT,
    "payload" jsonb,
    "attempts" INT,
    "max_attempts" INT,
    "lease_expires_at" timestamp with time zone,
    "priority" INT,
    "worker_id" TEXT
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'consume_task_from_queues_wrapper';
REVOKE ALL ON FUNCTION distlock.consume_task(text, interval, interval, text[]) FROM PUBLIC;

DROP FUNCTION distlock.consume_tasks(integer, text, interval, interval);
CREATE FUNCTION distlock.consume_tasks(
    "p_batch" INT,
    "p_worker_id" TEXT DEFAULT NULL,
    "p_lease" interval DEFAULT '5 minutes',
    "p_wait" interval DEFAULT NULL,
    "p_queues" TEXT[] DEFAULT NULL
) RETURNS TABLE (
    "task_id" bigint,
    "task_name" TEXT,
    "payload" jsonb,
    "attempts" INT,
    "max_attempts" INT,
    "lease_expires_at" timestamp with time zone,
    "priority" INT,
    "worker_id" TEXT
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'consume_tasks_from_queues_wrapper';
REVOKE ALL ON FUNCTION distlock.consume_tasks(integer, text, interval, interval, text[]) FROM PUBLIC;

-- Completed jobs move out of the queue into an insert-only archive: the
-- table the claims read keeps only work still to do (and dead jobs, which
-- wait for a person), and a completion writes a small delete there instead
-- of a whole new row version that retention would delete again later.
-- Measured: 1.4-1.9x the jobs/s of completing in place for a fleet of 16
-- consumers (docs/performance.md, "Finished jobs").
CREATE TABLE distlock.completed_jobs (
    id            bigint PRIMARY KEY,
    queue         text NOT NULL,
    task_name     text NOT NULL,
    payload       jsonb NOT NULL,
    worker_id     text,
    created_at    timestamptz NOT NULL,
    started_at    timestamptz,
    completed_at  timestamptz NOT NULL,
    attempts      int NOT NULL,
    max_attempts  int NOT NULL,
    run_after     timestamptz NOT NULL,
    priority      int NOT NULL,
    -- The error of the last failed attempt, if one failed before.
    last_error    text,
    holder_role   oid,
    producer_role oid,
    unique_key    text
);

COMMENT ON TABLE distlock.completed_jobs IS
    'Completed jobs, moved out of distlock.task_queue by their completion; prune_jobs deletes old ones.';

-- Retention deletes the oldest: completion order is insertion order, which
-- a BRIN index summarises in a few pages.
CREATE INDEX completed_jobs_completed_at_idx ON distlock.completed_jobs USING brin (completed_at);

-- Every job, queued or finished, in one relation with its status.
CREATE VIEW distlock.jobs AS
SELECT id, queue, task_name, payload, status, worker_id, created_at, started_at,
       completed_at, attempts, max_attempts, run_after, priority, lease_expires_at, last_error,
       holder_role, producer_role, unique_key
  FROM distlock.task_queue
UNION ALL
SELECT id, queue, task_name, payload, 'completed'::varchar(20), worker_id, created_at, started_at,
       completed_at, attempts, max_attempts, run_after, priority, NULL, last_error,
       holder_role, producer_role, unique_key
  FROM distlock.completed_jobs;

COMMENT ON VIEW distlock.jobs IS
    'Every job with its status: distlock.task_queue and distlock.completed_jobs together.';

-- Jobs completed under 0.2.0 move there now.
WITH moved AS (
    DELETE FROM distlock.task_queue
     WHERE status OPERATOR(pg_catalog.=) 'completed'
    RETURNING id, queue, task_name, payload, worker_id, created_at, started_at, completed_at, attempts, max_attempts,
              run_after, priority, last_error, holder_role, producer_role, unique_key
)
INSERT INTO distlock.completed_jobs (id, queue, task_name, payload, worker_id, created_at, started_at, completed_at,
                                     attempts, max_attempts, run_after, priority, last_error, holder_role,
                                     producer_role, unique_key)
SELECT id, queue, task_name, payload, worker_id, created_at, started_at,
       COALESCE(completed_at, started_at, created_at), attempts, max_attempts, run_after, priority, last_error,
       holder_role, producer_role, unique_key
  FROM moved;
REVOKE ALL ON distlock.completed_jobs, distlock.jobs FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('distlock.completed_jobs', '');

-- The queue views count completed jobs where they now are.
CREATE OR REPLACE VIEW distlock.queue_stats AS
SELECT q.task_name,
       q.status,
       count(*) AS jobs,
       pg_catalog.now() - min(q.created_at) FILTER (WHERE q.status = 'pending') AS oldest_pending_age,
       min(q.run_after) FILTER (WHERE q.status IN ('pending', 'failed')) AS next_run_after,
       count(*) FILTER (WHERE q.status = 'processing'
                          AND q.lease_expires_at <= pg_catalog.now()) AS expired_leases
  FROM distlock.jobs q
 GROUP BY q.task_name, q.status
HAVING distlock.in_monitor_scope(q.task_name);

-- Per-queue settings; a queue without a row is running and unlimited.
CREATE TABLE distlock.queue_settings (
    queue      text PRIMARY KEY,
    -- A paused queue hands out nothing; its waiting consumers keep waiting.
    paused     boolean NOT NULL DEFAULT false,
    -- At most this many jobs of the queue processing at once (NULL: no limit).
    max_processing int,
    updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE distlock.queue_settings IS
    'Per-queue settings (pause_queue, resume_queue, set_queue_limit); queues without a row run unlimited.';

CREATE VIEW distlock.queues AS
WITH unfinished AS (
    SELECT q.queue,
           count(*) FILTER (WHERE q.status = 'pending') AS pending,
           count(*) FILTER (WHERE q.status = 'processing') AS processing,
           count(*) FILTER (WHERE q.status = 'failed') AS failed,
           count(*) FILTER (WHERE q.status = 'dead') AS dead,
           min(q.created_at) FILTER (WHERE q.status = 'pending') AS oldest_pending
      FROM distlock.task_queue q
     GROUP BY q.queue),
-- The archive keeps every completed job until prune_jobs: counting all of
-- them would cost a scan of millions of rows, the last hour a BRIN range.
recent AS (
    SELECT c.queue, count(*) AS completed
      FROM distlock.completed_jobs c
     WHERE c.completed_at > pg_catalog.now() - interval '1 hour'
     GROUP BY c.queue)
SELECT n.queue AS name,
       COALESCE(s.paused, false) AS paused,
       s.max_processing,
       COALESCE(u.pending, 0) AS pending,
       COALESCE(u.processing, 0) AS processing,
       COALESCE(u.failed, 0) AS failed,
       COALESCE(u.dead, 0) AS dead,
       COALESCE(r.completed, 0) AS completed_last_hour,
       pg_catalog.now() - u.oldest_pending AS oldest_pending_age
  FROM (SELECT queue FROM distlock.queue_settings
        UNION
        SELECT queue FROM unfinished
        UNION
        SELECT queue FROM recent) n
  LEFT JOIN distlock.queue_settings s ON s.queue = n.queue
  LEFT JOIN unfinished u ON u.queue = n.queue
  LEFT JOIN recent r ON r.queue = n.queue
 WHERE distlock.in_monitor_scope(n.queue);

COMMENT ON VIEW distlock.queues IS
    'Queues with their settings, their unfinished jobs counted by status and the jobs completed in the last hour.';

-- Per queue and minute of the last hour: jobs completed and jobs that died
-- (failed their last attempt). A failure that is retried is not timestamped.
CREATE VIEW distlock.queue_throughput AS
SELECT e.queue, e.minute, sum(e.completed)::bigint AS completed, sum(e.died)::bigint AS died
  FROM (SELECT c.queue, pg_catalog.date_trunc('minute', c.completed_at) AS minute, count(*) AS completed, 0 AS died
          FROM distlock.completed_jobs c
         WHERE c.completed_at >= pg_catalog.date_trunc('minute', pg_catalog.now()) - interval '59 minutes'
         GROUP BY 1, 2
        UNION ALL
        SELECT d.queue, pg_catalog.date_trunc('minute', d.completed_at), 0, count(*)
          FROM distlock.task_queue d
         WHERE d.status = 'dead'
           AND d.completed_at >= pg_catalog.date_trunc('minute', pg_catalog.now()) - interval '59 minutes'
         GROUP BY 1, 2) e
 WHERE distlock.in_monitor_scope(e.queue)
 GROUP BY e.queue, e.minute;

COMMENT ON VIEW distlock.queue_throughput IS
    'Jobs completed and jobs that died per queue and minute, over the last hour.';

-- How long runnable jobs waited for a consumer: from when a job could run
-- (created_at, or run_after for a delayed or retried job) to the claim that
-- completed it, over the jobs completed in the last hour.
CREATE VIEW distlock.queue_latency AS
SELECT c.queue,
       count(*) AS jobs,
       pg_catalog.percentile_cont(0.5) WITHIN GROUP (ORDER BY w.wait) AS wait_p50,
       pg_catalog.percentile_cont(0.95) WITHIN GROUP (ORDER BY w.wait) AS wait_p95,
       pg_catalog.percentile_cont(0.99) WITHIN GROUP (ORDER BY w.wait) AS wait_p99,
       max(w.wait) AS wait_max
  FROM distlock.completed_jobs c
 CROSS JOIN LATERAL (SELECT GREATEST(c.started_at - GREATEST(c.created_at, c.run_after), interval '0') AS wait) w
 WHERE c.completed_at > pg_catalog.now() - interval '1 hour'
   AND c.started_at IS NOT NULL
 GROUP BY c.queue
HAVING distlock.in_monitor_scope(c.queue);

COMMENT ON VIEW distlock.queue_latency IS
    'Per queue, how long jobs completed in the last hour waited from runnable to started: percentiles and maximum.';

-- The same waits as distlock.queue_latency, as a cumulative histogram: per
-- queue and upper bound `le` in seconds, the jobs that waited less (the last
-- bound is infinite: every job). Shaped for Prometheus' histogram_quantile.
CREATE VIEW distlock.queue_wait_histogram AS
WITH bounds AS (
    SELECT ARRAY[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600]::float8[] AS le
),
-- A job's bucket: how many bounds its wait reached.
per_bucket AS (
    SELECT c.queue,
           pg_catalog.width_bucket(
               pg_catalog.date_part('epoch', GREATEST(c.started_at - GREATEST(c.created_at, c.run_after), interval '0')),
               b.le) AS reached,
           count(*) AS jobs
      FROM distlock.completed_jobs c, bounds b
     WHERE c.completed_at > pg_catalog.now() - interval '1 hour'
       AND c.started_at IS NOT NULL
     GROUP BY 1, 2
)
SELECT p.queue,
       u.le,
       COALESCE(sum(p.jobs) FILTER (WHERE p.reached < u.i), 0)::bigint AS jobs
  FROM per_bucket p, bounds b,
       LATERAL pg_catalog.unnest(b.le || 'Infinity'::float8) WITH ORDINALITY u(le, i)
 GROUP BY p.queue, u.le, u.i
HAVING distlock.in_monitor_scope(p.queue);

COMMENT ON VIEW distlock.queue_wait_histogram IS
    'Per queue, jobs completed in the last hour by how long they waited from runnable to started: cumulative counts below each bound in seconds.';
REVOKE ALL ON distlock.queue_settings, distlock.queues, distlock.queue_throughput, distlock.queue_latency,
              distlock.queue_wait_histogram FROM PUBLIC;
GRANT SELECT ON distlock.queues, distlock.queue_throughput, distlock.queue_latency,
                distlock.queue_wait_histogram TO pg_monitor;
SELECT pg_catalog.pg_extension_config_dump('distlock.queue_settings', '');

CREATE FUNCTION distlock.pause_queue("p_queue" TEXT) RETURNS bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'pause_queue_wrapper';
REVOKE ALL ON FUNCTION distlock.pause_queue(text) FROM PUBLIC;

CREATE FUNCTION distlock.resume_queue("p_queue" TEXT) RETURNS bool
LANGUAGE c
AS 'MODULE_PATHNAME', 'resume_queue_wrapper';
REVOKE ALL ON FUNCTION distlock.resume_queue(text) FROM PUBLIC;

CREATE FUNCTION distlock.set_queue_limit("p_queue" TEXT, "p_max_processing" INT) RETURNS void
LANGUAGE c
AS 'MODULE_PATHNAME', 'set_queue_limit_wrapper';
REVOKE ALL ON FUNCTION distlock.set_queue_limit(text, integer) FROM PUBLIC;

-- Consumers waiting for jobs and the wake-ups sent to them (the sleepers table).
CREATE FUNCTION distlock.queue_wait_stats() RETURNS TABLE (
    "sleeping" INT,
    "wakeups" bigint
)
STRICT VOLATILE PARALLEL RESTRICTED
LANGUAGE c
AS 'MODULE_PATHNAME', 'queue_wait_stats_wrapper';
REVOKE ALL ON FUNCTION distlock.queue_wait_stats() FROM PUBLIC;

-- One commit per job: settle the jobs just finished and claim the next ones in one call.
CREATE FUNCTION distlock.settle_and_consume_tasks(
    "p_batch" INT,
    "p_worker_id" TEXT DEFAULT NULL,
    "p_completed" bigint[] DEFAULT NULL,
    "p_completed_attempts" INT[] DEFAULT NULL,
    "p_failed" bigint[] DEFAULT NULL,
    "p_failed_attempts" INT[] DEFAULT NULL,
    "p_failed_errors" TEXT[] DEFAULT NULL,
    "p_lease" interval DEFAULT '5 minutes',
    "p_wait" interval DEFAULT NULL,
    "p_queues" TEXT[] DEFAULT NULL
) RETURNS TABLE (
    "task_id" bigint,
    "task_name" TEXT,
    "payload" jsonb,
    "attempts" INT,
    "max_attempts" INT,
    "lease_expires_at" timestamp with time zone,
    "priority" INT,
    "worker_id" TEXT,
    "outcome" TEXT
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'settle_and_consume_tasks_wrapper';
REVOKE ALL ON FUNCTION distlock.settle_and_consume_tasks(integer, text, bigint[], integer[], bigint[], integer[], text[], interval, interval, text[]) FROM PUBLIC;

-- One commit per task run: release the finished claim and claim the next due task in one call.
CREATE FUNCTION distlock.release_and_fetch_task(
    "p_task_id" INT,
    "p_worker_id" TEXT,
    "p_status" TEXT,
    "p_error_message" TEXT DEFAULT NULL
) RETURNS TABLE (
    "task_id" INT,
    "task_name" TEXT,
    "task_type" TEXT,
    "acquired" bool,
    "fencing_token" bigint
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'release_and_fetch_task_wrapper';
REVOKE ALL ON FUNCTION distlock.release_and_fetch_task(integer, text, text, text) FROM PUBLIC;
CREATE FUNCTION distlock.release_and_fetch_task(
    "p_task_id" INT,
    "p_fencing_token" bigint,
    "p_status" TEXT,
    "p_worker_id" TEXT,
    "p_lease" interval,
    "p_error_message" TEXT DEFAULT NULL
) RETURNS TABLE (
    "task_id" INT,
    "task_name" TEXT,
    "task_type" TEXT,
    "acquired" bool,
    "fencing_token" bigint
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'release_lease_and_fetch_task_wrapper';
REVOKE ALL ON FUNCTION distlock.release_and_fetch_task(integer, bigint, text, text, interval, text) FROM PUBLIC;

-- Many jobs in one statement (enqueue_task's batch form).
CREATE FUNCTION distlock.enqueue_tasks(
    "p_task_name" TEXT,
    "p_payloads" jsonb[],
    "p_run_after" timestamp with time zone DEFAULT now(),
    "p_priority" INT DEFAULT 0,
    "p_max_attempts" INT DEFAULT 5,
    "p_queue" TEXT DEFAULT 'default'
) RETURNS SETOF bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'enqueue_tasks_wrapper';
REVOKE ALL ON FUNCTION distlock.enqueue_tasks(text, jsonb[], timestamptz, integer, integer, text) FROM PUBLIC;

-- Dead jobs wait for a person: an admin retries or deletes them.
CREATE FUNCTION distlock.retry_dead_jobs("p_queue" TEXT DEFAULT NULL, "p_job_ids" bigint[] DEFAULT NULL) RETURNS bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'retry_dead_jobs_wrapper';
REVOKE ALL ON FUNCTION distlock.retry_dead_jobs(text, bigint[]) FROM PUBLIC;
CREATE FUNCTION distlock.delete_dead_jobs("p_queue" TEXT DEFAULT NULL, "p_job_ids" bigint[] DEFAULT NULL) RETURNS bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'delete_dead_jobs_wrapper';
REVOKE ALL ON FUNCTION distlock.delete_dead_jobs(text, bigint[]) FROM PUBLIC;

-- The recovery sweep's last run, so that a monitor can alert when nothing
-- runs it any more (pg_cron stopped, the job dropped, a failover to a node
-- without the schedule): check_and_recover_timeout_tasks records each run.

CREATE TABLE distlock.sweep_state (
    id             int PRIMARY KEY,
    -- NULL until the first run.
    last_run_at    timestamptz,
    -- Claims the last run ended (abandoned or timed out).
    last_recovered int,
    runs           bigint NOT NULL DEFAULT 0,
    -- Claims all runs ended: a total that only grows, for metrics.
    recovered      bigint NOT NULL DEFAULT 0
);

-- The one row, there from the start, so that a run records itself with an
-- UPDATE that can skip a concurrent sweep's lock instead of waiting for it.
INSERT INTO distlock.sweep_state (id) VALUES (1);

COMMENT ON TABLE distlock.sweep_state IS
    'The recovery sweep''s last run in this database (one row; last_run_at NULL before the first).';

CREATE VIEW distlock.sweep_status AS
SELECT s.last_run_at,
       pg_catalog.now() - s.last_run_at AS since_last_run,
       s.last_recovered,
       s.runs,
       s.recovered AS recovered_total
  FROM distlock.sweep_state s;

COMMENT ON VIEW distlock.sweep_status IS
    'When the recovery sweep last ran, how long ago, and what it recovered; NULLs before its first run.';
REVOKE ALL ON distlock.sweep_state, distlock.sweep_status FROM PUBLIC;
GRANT SELECT ON distlock.sweep_status TO pg_monitor;

-- Runs ended with each status, counted by the release that ends them:
-- totals that only grow, for metrics (the log is pruned). Existing tasks
-- start from their log as it stands.
ALTER TABLE distlock.scheduled_tasks
    ADD COLUMN runs_completed bigint NOT NULL DEFAULT 0,
    ADD COLUMN runs_failed    bigint NOT NULL DEFAULT 0,
    ADD COLUMN runs_timed_out bigint NOT NULL DEFAULT 0,
    ADD COLUMN runs_abandoned bigint NOT NULL DEFAULT 0;
UPDATE distlock.scheduled_tasks t
   SET runs_completed = l.completed, runs_failed = l.failed,
       runs_timed_out = l.timed_out, runs_abandoned = l.abandoned
  FROM (SELECT task_id,
               count(*) FILTER (WHERE status = 'completed') AS completed,
               count(*) FILTER (WHERE status = 'failed') AS failed,
               count(*) FILTER (WHERE status = 'timed_out') AS timed_out,
               count(*) FILTER (WHERE status = 'abandoned') AS abandoned
          FROM distlock.task_execution_log
         GROUP BY task_id) l
 WHERE l.task_id = t.id;

-- Every scheduled task as it stands, without its runs: cheap at any number
-- of tasks, where task_stats counts each task's whole log.
CREATE VIEW distlock.task_schedule AS
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
       t.runs_abandoned
  FROM distlock.scheduled_tasks t
 WHERE distlock.in_monitor_scope(t.task_name, t.task_type);

COMMENT ON VIEW distlock.task_schedule IS
    'Scheduled tasks with their schedule, next and last run and last status, without counting their runs.';
REVOKE ALL ON distlock.task_schedule FROM PUBLIC;
GRANT SELECT ON distlock.task_schedule TO pg_monitor;

-- Grants are reset to what the capability model gives, naming each one it
-- takes away in a WARNING (PostgreSQL raises client_min_messages to warning
-- while an extension script runs, so a NOTICE would never be seen). pg_distlock's functions run their statements as the
-- extension's owner since 0.2.0, so an EXECUTE granted by hand under 0.1.0
-- (on the sweep, say) now gives more than it did then; and the table-wide
-- INSERT on scheduled_tasks of 0.2.0's admins is replaced by the column list.
DO $reset$
DECLARE
    g record;
BEGIN
    FOR g IN
        SELECT pg_catalog.format('INSERT ON distlock.scheduled_tasks FROM %s',
                                 CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END) AS what
          FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid OPERATOR(pg_catalog.=) 'distlock.scheduled_tasks'::pg_catalog.regclass
           AND a.privilege_type OPERATOR(pg_catalog.=) 'INSERT'
           AND a.grantee OPERATOR(pg_catalog.<>) c.relowner
    LOOP
        EXECUTE 'REVOKE ' OPERATOR(pg_catalog.||) g.what;
        RAISE WARNING 'pg_distlock 0.3.0: revoked % (admins insert task definitions through a column list)', g.what;
    END LOOP;
    FOR g IN
        -- Named with its schema whatever the script's search_path.
        SELECT 'distlock.' OPERATOR(pg_catalog.||) p.proname OPERATOR(pg_catalog.||) '('
               OPERATOR(pg_catalog.||) pg_catalog.array_to_string(p.proargtypes::pg_catalog.regtype[], ',')
               OPERATOR(pg_catalog.||) ')' AS function,
               CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE a.grantee::pg_catalog.regrole::pg_catalog.text END AS grantee
          FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
         WHERE p.pronamespace OPERATOR(pg_catalog.=) 'distlock'::pg_catalog.regnamespace
           AND a.privilege_type OPERATOR(pg_catalog.=) 'EXECUTE'
           AND a.grantee OPERATOR(pg_catalog.<>) p.proowner
           -- What the install script itself grants.
           AND NOT (a.grantee OPERATOR(pg_catalog.=) 'pg_monitor'::pg_catalog.regrole
                    AND p.oid OPERATOR(pg_catalog.=) ANY (ARRAY['distlock.task_lock_class()'::pg_catalog.regprocedure,
                                                               'distlock.lock_stats_entries()'::pg_catalog.regprocedure,
                                                               'distlock.in_monitor_scope(text, text)'::pg_catalog.regprocedure]::pg_catalog.oid[]))
           -- What a capability of the grantee gives.
           AND NOT EXISTS (
                SELECT 1
                  FROM distlock.role_capabilities rc,
                       distlock.capability_privileges(rc.capability) cp
                 WHERE rc.role::pg_catalog.oid OPERATOR(pg_catalog.=) a.grantee
                   AND cp.privilege OPERATOR(pg_catalog.=) 'EXECUTE'
                   AND pg_catalog.to_regprocedure(pg_catalog.substr(cp.object, 10))::pg_catalog.oid OPERATOR(pg_catalog.=) p.oid)
    LOOP
        EXECUTE pg_catalog.format('REVOKE EXECUTE ON FUNCTION %s FROM %s', g.function, g.grantee);
        RAISE WARNING 'pg_distlock 0.3.0: revoked EXECUTE on function % from % (no capability of that role includes it; grant one with distlock.grant_capability)',
            g.function, g.grantee;
    END LOOP;
    -- Admins get the column list; every capability gets what it gained.
    FOR g IN SELECT rc.role, rc.capability FROM distlock.role_capabilities rc LOOP
        PERFORM distlock.grant_capability(g.role, g.capability);
    END LOOP;
END
$reset$;

-- Last: privileges granted or revoked by an extension script are recorded in
-- pg_init_privs as the extension's own, and pg_dump writes only what differs
-- from them, so grants to users that this or an earlier update script made
-- (0.1.0 -> 0.2.0 kept users' grants on recreated objects) would vanish in a
-- dump and restore. What a fresh install records is the owner's and
-- pg_monitor's privileges alone; everything else is taken out again.
WITH members AS (
    SELECT d.classid, d.objid, e.extowner
      FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
     WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND e.extname OPERATOR(pg_catalog.=) 'pg_distlock'
       AND d.deptype OPERATOR(pg_catalog.=) 'e'
),
kept AS (
    SELECT ip.objoid, ip.classoid, ip.objsubid,
           (SELECT pg_catalog.array_agg(u.item ORDER BY u.position)
              FROM pg_catalog.unnest(ip.initprivs) WITH ORDINALITY AS u(item, position)
             WHERE (SELECT x.grantee FROM pg_catalog.aclexplode(ARRAY[u.item]) x LIMIT 1)
                   OPERATOR(pg_catalog.=) ANY (ARRAY[m.extowner, 'pg_monitor'::pg_catalog.regrole::pg_catalog.oid])) AS initprivs
      FROM pg_catalog.pg_init_privs ip
      JOIN members m ON m.classid OPERATOR(pg_catalog.=) ip.classoid AND m.objid OPERATOR(pg_catalog.=) ip.objoid
     WHERE ip.privtype OPERATOR(pg_catalog.=) 'e'
),
emptied AS (
    DELETE FROM pg_catalog.pg_init_privs ip
     USING kept k
     WHERE k.initprivs IS NULL
       AND ip.objoid OPERATOR(pg_catalog.=) k.objoid AND ip.classoid OPERATOR(pg_catalog.=) k.classoid
       AND ip.objsubid OPERATOR(pg_catalog.=) k.objsubid AND ip.privtype OPERATOR(pg_catalog.=) 'e'
)
UPDATE pg_catalog.pg_init_privs ip
   SET initprivs = k.initprivs
  FROM kept k
 WHERE k.initprivs IS NOT NULL
   AND ip.objoid OPERATOR(pg_catalog.=) k.objoid AND ip.classoid OPERATOR(pg_catalog.=) k.classoid
   AND ip.objsubid OPERATOR(pg_catalog.=) k.objsubid AND ip.privtype OPERATOR(pg_catalog.=) 'e';
