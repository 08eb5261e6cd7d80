-- pg_distlock 0.3.0 -> 0.4.0, run by ALTER EXTENSION pg_distlock UPDATE.
-- Every schema or grant change since 0.3.0 is here as well as in the install
-- script that sql/*.sql and src/ generate; tests/cluster/upgrade.rs walks
-- 0.1.0 -> 0.2.0 -> 0.3.0 -> 0.4.0 and checks that the result equals a fresh
-- 0.4.0 install (tests/cluster/schema_fingerprint.sql) and keeps its data.
\echo Use "ALTER EXTENSION pg_distlock UPDATE TO '0.4.0'" to load this file. \quit

-- The scope filter stands over the union: a view that is a bare UNION ALL is
-- flattened into its branches, which loses the security barrier, and a
-- caller's cheap function would then run inside each branch before its
-- filter.
CREATE OR REPLACE VIEW distlock.leases WITH (security_barrier) AS
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

-- advisory_locks leaves out the lock each session claim now takes to name
-- the claim (objsubid 25709).
CREATE OR REPLACE VIEW distlock.advisory_locks WITH (security_barrier) AS
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

-- Views that filter rows by the caller's monitor scope are security
-- barriers (issue 44, item 3): a scoped monitor's cheap function in its own
-- WHERE clause no longer runs on rows of other tenants.
ALTER VIEW distlock.advisory_locks SET (security_barrier = true);
ALTER VIEW distlock.lock_waits SET (security_barrier = true);
ALTER VIEW distlock.running_tasks SET (security_barrier = true);
ALTER VIEW distlock.task_stats SET (security_barrier = true);
ALTER VIEW distlock.task_schedule SET (security_barrier = true);
ALTER VIEW distlock.blocked_tasks SET (security_barrier = true);
ALTER VIEW distlock.leases SET (security_barrier = true);
ALTER VIEW distlock.leaders SET (security_barrier = true);
ALTER VIEW distlock.lock_key_collisions SET (security_barrier = true);
ALTER VIEW distlock.lock_stats SET (security_barrier = true);
ALTER VIEW distlock.queues SET (security_barrier = true);
ALTER VIEW distlock.queue_throughput SET (security_barrier = true);
ALTER VIEW distlock.queue_latency SET (security_barrier = true);
ALTER VIEW distlock.queue_wait_histogram SET (security_barrier = true);
ALTER VIEW distlock.queue_stats SET (security_barrier = true);

-- Admins take processing jobs back from their consumers (issue 44, item 5).
CREATE FUNCTION distlock.requeue_jobs(
    p_queue text DEFAULT NULL,
    p_job_ids bigint[] DEFAULT NULL
) RETURNS bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'requeue_jobs_wrapper';
REVOKE ALL ON FUNCTION distlock.requeue_jobs(text, bigint[]) FROM PUBLIC;

-- A task is run now, out of its schedule, by an admin (issue 47, item 5).
CREATE FUNCTION distlock.run_task_now(
    p_task_id integer
) RETURNS boolean
LANGUAGE c
AS 'MODULE_PATHNAME', 'run_task_now_wrapper';
REVOKE ALL ON FUNCTION distlock.run_task_now(integer) FROM PUBLIC;

-- How long an idle worker may sleep until a task it may claim is due
-- (issue 48: a worker polling every second ran per-second slots late).
CREATE FUNCTION distlock.next_task_wait() RETURNS interval
STRICT
LANGUAGE c
AS 'MODULE_PATHNAME', 'next_task_wait_wrapper';
REVOKE ALL ON FUNCTION distlock.next_task_wait() FROM PUBLIC;

-- A schedule evaluated on the wall clock of a named time zone (issue 48).
CREATE FUNCTION distlock.cron_next(
    p_expr text,
    p_after timestamptz,
    p_timezone text
) RETURNS timestamptz
IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c
AS 'MODULE_PATHNAME', 'cron_next_in_zone_wrapper';
REVOKE ALL ON FUNCTION distlock.cron_next(text, timestamptz, text) FROM PUBLIC;

-- A queue is emptied without reusing job ids (issue 45, item 1).
CREATE FUNCTION distlock.purge_queue(
    p_queue text,
    p_processing boolean DEFAULT false
) RETURNS bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'purge_queue_wrapper';
REVOKE ALL ON FUNCTION distlock.purge_queue(text, boolean) FROM PUBLIC;

-- TRUNCATE distlock.task_queue RESTART IDENTITY starts job ids over, at ids
-- that completed_jobs still holds (each completion of such a job failed with
-- 23505 and the job ran again until it was dead) and at ids of jobs that
-- consumers may still hold (whose stale settles would then settle another
-- job). So before any TRUNCATE of the queue, the id sequence's start moves
-- above the highest id in use, which is where RESTART IDENTITY restarts it:
-- no id is handed out twice. It fires ALWAYS, also where
-- session_replication_role is replica (a logical-replication subscriber
-- applying a TRUNCATE). (distlock.purge_queue empties one queue and reuses
-- no id either.)
CREATE FUNCTION distlock.keep_job_ids_unique() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    in_use bigint;
BEGIN
    SELECT GREATEST((SELECT pg_catalog.max(q.id) FROM distlock.task_queue q),
                    (SELECT pg_catalog.max(c.id) FROM distlock.completed_jobs c),
                    (SELECT s.last_value FROM distlock.task_queue_id_seq s))
      INTO in_use;
    EXECUTE pg_catalog.format('ALTER SEQUENCE distlock.task_queue_id_seq START WITH %s',
                              in_use OPERATOR(pg_catalog.+) 1);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION distlock.keep_job_ids_unique() FROM PUBLIC;
CREATE TRIGGER keep_job_ids_unique BEFORE TRUNCATE ON distlock.task_queue
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.keep_job_ids_unique();
ALTER TABLE distlock.task_queue ENABLE ALWAYS TRIGGER keep_job_ids_unique;

-- Rate-limit keys can be listed (monitors, scoped) and reset by prefix
-- (admins): issue 44, item 3.
CREATE FUNCTION distlock.rate_limit_keys() RETURNS TABLE (
    kind text,
    key text,
    key_complete boolean,
    request_count integer,
    max_requests integer,
    expires_at timestamp with time zone
)
LANGUAGE c STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'rate_limit_keys_wrapper';
REVOKE ALL ON FUNCTION distlock.rate_limit_keys() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION distlock.rate_limit_keys() TO pg_monitor;

CREATE FUNCTION distlock.reset_rate_limits(p_key_prefix text DEFAULT NULL) RETURNS bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'reset_rate_limits_wrapper';
REVOKE ALL ON FUNCTION distlock.reset_rate_limits(text) FROM PUBLIC;

-- Cumulative per-queue job counters and a wait histogram, kept in shared
-- memory and counted at commit (issue 47, item 3): what Prometheus needs.
CREATE FUNCTION distlock.queue_counters() RETURNS TABLE (
    queue text,
    queue_complete boolean,
    claimed bigint,
    completed bigint,
    failed bigint,
    dead bigint,
    taken_over bigint,
    expired bigint,
    wait_le double precision[],
    wait_buckets bigint[],
    wait_sum double precision,
    wait_count bigint,
    since timestamp with time zone
)
LANGUAGE c STRICT PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'queue_counters_wrapper';
REVOKE ALL ON FUNCTION distlock.queue_counters() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION distlock.queue_counters() TO pg_monitor;

-- Each side's lock owner in lock_waits (issue 47, item 2): the console and
-- `pg-distlock locks` join a client's connections into one node and mark the
-- deadlocks across them that pg_distlock breaks (views.sql).
CREATE FUNCTION distlock.lock_owner_published(p_pid integer) RETURNS text
LANGUAGE c PARALLEL RESTRICTED
AS 'MODULE_PATHNAME', 'lock_owner_published_wrapper';
REVOKE ALL ON FUNCTION distlock.lock_owner_published(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION distlock.lock_owner_published(integer) TO pg_monitor;
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
REVOKE ALL ON FUNCTION distlock.lock_owner(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION distlock.lock_owner(integer) TO pg_monitor;
CREATE OR REPLACE VIEW distlock.lock_waits WITH (security_barrier) AS
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

CREATE FUNCTION distlock.reset_queue_counters(p_queue text DEFAULT NULL) RETURNS bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'reset_queue_counters_wrapper';
REVOKE ALL ON FUNCTION distlock.reset_queue_counters(text) FROM PUBLIC;

-- This database's secret for the hash that places pg_distlock's own locks
-- on names (the locks ordering lease and election grants, and the claim
-- turns of limited queues): with it unknown, nobody can choose a name whose
-- lock falls on another tenant's (0.3.0 used md5 bits anyone could match).
-- Drawn at install; readable by the owner alone. pg_dump leaves it out, so
-- a restored database draws its own.
CREATE TABLE distlock.lock_key_secret (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    secret   bytea NOT NULL CHECK (pg_catalog.length(secret) OPERATOR(pg_catalog.>=) 16)
);

INSERT INTO distlock.lock_key_secret (secret)
SELECT pg_catalog.sha256(pg_catalog.convert_to(
           pg_catalog.gen_random_uuid()::text OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid()::text, 'UTF8'));

COMMENT ON TABLE distlock.lock_key_secret IS
    'Secret keying the hash of pg_distlock''s own name-derived locks (owner only).';

-- Drawn once: each backend reads the secret once, so a changed secret would
-- leave older backends taking other locks than newer ones for the same name
-- (two grants of a name at once, a limited queue over its limit).
CREATE FUNCTION distlock.refuse_lock_key_secret_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'distlock.lock_key_secret is drawn once, at install, and never changes'
        USING ERRCODE = '55000',
              HINT = 'Backends keep the secret they read; to draw a new one, drop and create the extension.';
END
$$;
REVOKE ALL ON FUNCTION distlock.refuse_lock_key_secret_change() FROM PUBLIC;
CREATE TRIGGER drawn_once BEFORE UPDATE OR DELETE OR TRUNCATE ON distlock.lock_key_secret
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.refuse_lock_key_secret_change();
-- As the install's REVOKE ALL ON ALL TABLES leaves it: the owner's
-- privileges written out, nobody else's.
REVOKE ALL ON distlock.lock_key_secret FROM PUBLIC;

-- Each attempt that ended without success, with its error (issue 47, item
-- 5): written by the statement that ended it, deleted with its job, read by
-- admins (the capability list below). Jobs that failed before this update
-- have only their last_error. (As queue.sql creates it.)
CREATE TABLE distlock.job_attempts (
    job_id     bigint NOT NULL,
    -- The job's attempts when this one ended (its claims so far).
    attempt    int NOT NULL,
    worker_id  text,
    started_at timestamptz,
    ended_at   timestamptz NOT NULL,
    outcome    text NOT NULL,
    error      text,
    PRIMARY KEY (job_id, attempt)
);
COMMENT ON TABLE distlock.job_attempts IS
    'Attempts of jobs that ended without success (failed, dead, expired, requeued), with their errors; readable by admins.';
-- As the install's REVOKE ALL ON ALL TABLES leaves it.
REVOKE ALL ON distlock.job_attempts FROM PUBLIC;
-- Kept by pg_dump, as the other queue tables are.
SELECT pg_catalog.pg_extension_config_dump('distlock.job_attempts', '');

-- (As queue.sql creates it.) TRUNCATE of the queue or of its archive removes jobs without the
-- statements that delete their attempts with them (prune_jobs,
-- delete_dead_jobs, purge_queue): the attempts of jobs in neither table go
-- too, so that none is kept for ever. (No id is reused meanwhile:
-- keep_job_ids_unique.) TRUNCATE holds the truncated table, so no job
-- moves between the two while it runs.
CREATE FUNCTION distlock.forget_truncated_attempts() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Only in READ COMMITTED, where this statement's snapshot sees every
    -- job moved before the TRUNCATE took its lock: under an older snapshot
    -- (REPEATABLE READ, SERIALIZABLE) a job completed meanwhile looked gone
    -- and its history was deleted (review helper-83). There the attempts
    -- stay, of no job: no id is reused (keep_job_ids_unique).
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RETURN NULL;
    END IF;
    DELETE FROM distlock.job_attempts a
     WHERE NOT EXISTS (SELECT FROM distlock.task_queue q WHERE q.id OPERATOR(pg_catalog.=) a.job_id)
       AND NOT EXISTS (SELECT FROM distlock.completed_jobs c WHERE c.id OPERATOR(pg_catalog.=) a.job_id);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION distlock.forget_truncated_attempts() FROM PUBLIC;
CREATE TRIGGER forget_truncated_attempts AFTER TRUNCATE ON distlock.task_queue
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.forget_truncated_attempts();
CREATE TRIGGER forget_truncated_attempts AFTER TRUNCATE ON distlock.completed_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.forget_truncated_attempts();
-- ALWAYS, as keep_job_ids_unique: also where session_replication_role is
-- replica (a logical-replication subscriber applying a TRUNCATE).
ALTER TABLE distlock.task_queue ENABLE ALWAYS TRIGGER forget_truncated_attempts;
ALTER TABLE distlock.completed_jobs ENABLE ALWAYS TRIGGER forget_truncated_attempts;

-- A lease-mode claim records in the task row the backend that made it or
-- last renewed it, and running_tasks shows whether that backend is still
-- connected (issue 45, item 10: a worker killed with its claim showed as
-- alive until its lease ran out). The claim and the renewal already lock the
-- task row, so recording it takes no lock in a new order.
ALTER TABLE distlock.scheduled_tasks
    ADD COLUMN lease_backend_pid int,
    ADD COLUMN lease_backend_start timestamptz;

-- Each task's schedule in a time zone of its own (issue 48): NULL, as every
-- task has after this update, is distlock.timezone, UTC unless set, so the
-- tasks keep their times. The trigger validates the zone and computes the
-- first slot in it.
ALTER TABLE distlock.scheduled_tasks ADD COLUMN schedule_timezone text;

-- What a fetch does with slots a task missed (issue 48): 'once', as every
-- task has after this update, is 0.3.0's behaviour. A constant default
-- rewrites no row.
ALTER TABLE distlock.scheduled_tasks
    ADD COLUMN missed_runs text NOT NULL DEFAULT 'once',
    ADD COLUMN missed_runs_grace interval,
    ADD COLUMN missed_runs_max int,
    ADD COLUMN runs_skipped bigint NOT NULL DEFAULT 0,
    ADD COLUMN retry_slot timestamptz;
-- A skipped slot is logged with status skipped. (Re-adding the constraint
-- checks the log's rows against it, all of which pass.)
ALTER DOMAIN distlock.run_status DROP CONSTRAINT run_status_known;
ALTER DOMAIN distlock.run_status ADD CONSTRAINT run_status_known
    CHECK (VALUE IN ('running', 'completed', 'failed', 'timed_out', 'abandoned', 'skipped'));
CREATE OR REPLACE FUNCTION distlock.scheduled_tasks_check() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    next_slot timestamptz;
    zone text;
    probe timestamptz;
BEGIN
    -- The rule every name obeys (src/text.rs): not blank, at most 1000 bytes.
    IF NEW.task_name IS NULL OR btrim(NEW.task_name, E' \t\n\r\f\v') = '' THEN
        RAISE EXCEPTION 'task_name must not be blank, got "%"', NEW.task_name USING ERRCODE = 'check_violation';
    END IF;
    IF octet_length(NEW.task_name) > 1000 THEN
        RAISE EXCEPTION 'task_name must be at most 1000 bytes, got % bytes', octet_length(NEW.task_name)
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.task_type IS NULL OR btrim(NEW.task_type) = '' THEN
        RAISE EXCEPTION 'task_type of task "%" must not be empty, got "%"', NEW.task_name, NEW.task_type
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.timeout <= interval '0' THEN
        RAISE EXCEPTION 'timeout of task "%" must be positive, got %', NEW.task_name, NEW.timeout
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.max_retries NOT BETWEEN 0 AND 1000 THEN
        RAISE EXCEPTION 'max_retries of task "%" must be between 0 and 1000, got %', NEW.task_name, NEW.max_retries
            USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.retry_delay <= interval '0' THEN
        RAISE EXCEPTION 'retry_delay of task "%" must be positive, got %', NEW.task_name, NEW.retry_delay
            USING ERRCODE = 'check_violation';
    END IF;
    -- Retries wait at most an hour, so a longer first delay means nothing,
    -- and doubling a huge one would overflow the interval type.
    IF NEW.retry_delay > interval '1 hour' THEN
        RAISE EXCEPTION 'retry_delay of task "%" must be at most 1 hour, got %', NEW.task_name, NEW.retry_delay
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.missed_runs IS NULL OR NEW.missed_runs NOT IN ('once', 'skip', 'all') THEN
        RAISE EXCEPTION 'missed_runs of task "%" must be once, skip or all, got "%"', NEW.task_name, NEW.missed_runs
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.missed_runs_grace < interval '0' THEN
        RAISE EXCEPTION 'missed_runs_grace of task "%" must not be negative, got %', NEW.task_name, NEW.missed_runs_grace
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.missed_runs = 'skip' AND NEW.missed_runs_grace IS NULL THEN
        RAISE EXCEPTION 'missed_runs skip of task "%" needs missed_runs_grace: how late a slot may still run',
            NEW.task_name
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The newest slots an outage left are found by stepping through the
    -- schedule (src/tasks/missed.rs): bounded so that a fetch stays quick.
    IF NEW.missed_runs_max NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'missed_runs_max of task "%" must be between 1 and 1000, got %', NEW.task_name, NEW.missed_runs_max
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NEW.schedule_timezone IS NOT NULL THEN
        BEGIN
            PERFORM distlock.cron_next('@daily', now(), NEW.schedule_timezone);
        EXCEPTION WHEN invalid_parameter_value THEN
            RAISE EXCEPTION 'schedule_timezone of task "%" is not a time zone this server knows, got "%"',
                NEW.task_name, NEW.schedule_timezone
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'An IANA name such as Europe/Berlin, as pg_timezone_names lists them.';
        END;
    END IF;
    -- The setting is read even before the library is loaded (a placeholder
    -- keeps what postgresql.conf says); unset, it is UTC.
    zone := COALESCE(NEW.schedule_timezone, current_setting('distlock.timezone', true), 'UTC');
    -- AT TIME ZONE (and so SQL, the console and the CLI) reads a name that
    -- is also a time zone abbreviation (CET, EET, MET, WET) as that
    -- abbreviation's fixed offset, while the scheduler follows the zone of
    -- that name, summer time included: refused when the two disagree.
    IF EXISTS (SELECT FROM pg_timezone_abbrevs a WHERE lower(a.abbrev) = lower(zone)) THEN
        FOREACH probe IN ARRAY ARRAY[timestamptz '2026-01-10 00:00:00+00', timestamptz '2026-07-10 00:00:00+00'] LOOP
            IF (distlock.cron_next('0 12 * * *', probe, zone) AT TIME ZONE zone)::time <> time '12:00' THEN
                RAISE EXCEPTION 'time zone "%" (%) is also an abbreviation, which AT TIME ZONE reads as a fixed offset',
                    zone, CASE WHEN NEW.schedule_timezone IS NULL THEN 'distlock.timezone'
                               ELSE format('schedule_timezone of task "%s"', NEW.task_name) END
                    USING ERRCODE = 'invalid_parameter_value',
                          HINT = 'Name the zone itself, such as Europe/Paris, as pg_timezone_names lists them.';
            END IF;
        END LOOP;
    END IF;
    IF NEW.schedule_cron IS NULL THEN
        RETURN NEW;
    END IF;
    next_slot := distlock.cron_next(NEW.schedule_cron, now(), zone);
    IF TG_OP = 'INSERT' THEN
        IF NEW.next_run_at IS NULL THEN
            NEW.next_run_at := next_slot;
        END IF;
    ELSIF (NEW.schedule_cron IS DISTINCT FROM OLD.schedule_cron
           OR NEW.schedule_timezone IS DISTINCT FROM OLD.schedule_timezone)
          AND NEW.next_run_at IS NOT DISTINCT FROM OLD.next_run_at THEN
        NEW.next_run_at := next_slot;
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER scheduled_tasks_check ON distlock.scheduled_tasks;
CREATE TRIGGER scheduled_tasks_check
    BEFORE INSERT OR UPDATE OF task_name, task_type, schedule_cron, timeout, max_retries, retry_delay,
                               schedule_timezone, missed_runs, missed_runs_grace, missed_runs_max
    ON distlock.scheduled_tasks
    FOR EACH ROW EXECUTE FUNCTION distlock.scheduled_tasks_check();

-- task_stats counts skipped slots apart from runs (issue 48).
CREATE OR REPLACE VIEW distlock.task_stats WITH (security_barrier) AS
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

-- task_schedule shows the zone each task's schedule follows.
CREATE OR REPLACE VIEW distlock.task_schedule WITH (security_barrier) AS
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

CREATE FUNCTION distlock.lease_backend_connected(
    p_task_id integer
) RETURNS boolean
LANGUAGE c
AS 'MODULE_PATHNAME', 'lease_backend_connected_wrapper';
REVOKE ALL ON FUNCTION distlock.lease_backend_connected(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION distlock.lease_backend_connected(integer) TO pg_monitor;
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

REVOKE ALL ON FUNCTION distlock.lease_backend_alive(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION distlock.lease_backend_alive(integer) TO pg_monitor;
CREATE OR REPLACE VIEW distlock.running_tasks WITH (security_barrier) AS
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

-- Jobs carry a group within their queue (issue 49, item 1): enqueue_task
-- and enqueue_tasks take it as p_group, after 0.3.0's parameters, so that
-- every call of 0.3.0 means what it meant (enqueue_task also takes
-- p_unique_for, last: item 6). Added as the last column of both job
-- tables and of distlock.jobs, as a fresh install has it.
ALTER TABLE distlock.task_queue ADD COLUMN group_key text;
ALTER TABLE distlock.completed_jobs ADD COLUMN group_key text;
-- enqueue_task's p_unique_for (issue 49, item 6) reads the completed holders
-- of a key. Built under a SHARE lock on completed_jobs: completions wait for
-- the build, which reads the archive once (docs/upgrading.md).
CREATE INDEX completed_jobs_unique_key_idx
    ON distlock.completed_jobs (unique_key, queue, completed_at)
    WHERE unique_key IS NOT NULL;
CREATE OR REPLACE VIEW distlock.jobs AS
SELECT id, queue, task_name, payload, status, worker_id, created_at, started_at,
       completed_at, attempts, max_attempts, run_after, priority, lease_expires_at, last_error,
       holder_role, producer_role, unique_key, group_key
  FROM distlock.task_queue
UNION ALL
SELECT id, queue, task_name, payload, 'completed'::varchar(20), worker_id, created_at, started_at,
       completed_at, attempts, max_attempts, run_after, priority, NULL, last_error,
       holder_role, producer_role, unique_key, group_key
  FROM distlock.completed_jobs;

-- Consumers learn each claimed job's queue (issue 47, item 6) and group
-- (issue 49): consume_task, consume_tasks and settle_and_consume_tasks
-- return them as their last columns;
-- producers give a job's group (above) to enqueue_task and enqueue_tasks.
-- CREATE OR REPLACE cannot change a result type (nor add a parameter: that
-- makes another function, and every call of the old one ambiguous), and DROP
-- would pull the functions from under the consumers waiting in them right now (their call
-- fails to build its result row, XX000, review 41) and make this update fail
-- for a view of the user over one of them. So 0.3.0's five are renamed
-- (*_0_3_0, bound to 0.3.0's C symbols in src/compat/v0_3_0.rs): a call
-- running in one ends as it began; the next release drops them. An object
-- of the user over one (a view, a BEGIN ATOMIC function) stops the update,
-- as DROP would: renamed along, it would call a function that no dump
-- restores (a fresh install has none). The new definitions take the
-- names, with the grants 0.3.0's had (capabilities' and by hand, each now
-- by the owner; not what the owner's default privileges add at CREATE).
-- The renamed ones refuse new calls (src/compat/v0_3_0.rs), so that
-- revoke_capability, which knows only the new ones, leaves no way to claim
-- behind, and keep no grants but the owner's where the owner can take them.
DO $no_dependents$
DECLARE
    dependents text;
BEGIN
    SELECT pg_catalog.string_agg(pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid), ', '
                                 ORDER BY pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid))
      INTO dependents
      FROM pg_catalog.pg_depend d
     WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_proc'::pg_catalog.regclass
       AND d.refobjid OPERATOR(pg_catalog.=) ANY (ARRAY[
               'distlock.consume_task(text, interval, interval, text[])',
               'distlock.consume_tasks(integer, text, interval, interval, text[])',
               'distlock.settle_and_consume_tasks(integer, text, bigint[], integer[], bigint[], integer[], text[], interval, interval, text[])',
               'distlock.enqueue_task(text, jsonb, timestamptz, integer, integer, text, text)',
               'distlock.enqueue_tasks(text, jsonb[], timestamptz, integer, integer, text)'
           ]::pg_catalog.regprocedure[]::pg_catalog.oid[])
       AND d.deptype OPERATOR(pg_catalog.=) 'n';
    IF dependents IS NOT NULL THEN
        RAISE EXCEPTION 'pg_distlock 0.4.0 adds queue and group_key columns to consume_task, consume_tasks and settle_and_consume_tasks and a group parameter to enqueue_task and enqueue_tasks, which % depends on', dependents
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'Drop it, run ALTER EXTENSION pg_distlock UPDATE, then create it again (docs/upgrading.md).';
    END IF;
END
$no_dependents$;
ALTER FUNCTION distlock.consume_task(text, interval, interval, text[]) RENAME TO consume_task_0_3_0;
ALTER FUNCTION distlock.consume_tasks(integer, text, interval, interval, text[]) RENAME TO consume_tasks_0_3_0;
ALTER FUNCTION distlock.settle_and_consume_tasks(integer, text, bigint[], integer[], bigint[], integer[], text[], interval, interval, text[])
    RENAME TO settle_and_consume_tasks_0_3_0;
COMMENT ON FUNCTION distlock.consume_task_0_3_0(text, interval, interval, text[]) IS
    '0.3.0''s consume_task (no queue column), kept by the update to 0.4.0 for calls running during it; dropped by the next release.';
COMMENT ON FUNCTION distlock.consume_tasks_0_3_0(integer, text, interval, interval, text[]) IS
    '0.3.0''s consume_tasks (no queue column), kept by the update to 0.4.0 for calls running during it; dropped by the next release.';
COMMENT ON FUNCTION distlock.settle_and_consume_tasks_0_3_0(integer, text, bigint[], integer[], bigint[], integer[], text[], interval, interval, text[]) IS
    '0.3.0''s settle_and_consume_tasks (no queue column), kept by the update to 0.4.0 for calls running during it; dropped by the next release.';
ALTER FUNCTION distlock.enqueue_task(text, jsonb, timestamptz, integer, integer, text, text) RENAME TO enqueue_task_0_3_0;
ALTER FUNCTION distlock.enqueue_tasks(text, jsonb[], timestamptz, integer, integer, text) RENAME TO enqueue_tasks_0_3_0;
COMMENT ON FUNCTION distlock.enqueue_task_0_3_0(text, jsonb, timestamptz, integer, integer, text, text) IS
    '0.3.0''s enqueue_task (no group), kept by the update to 0.4.0 for calls running during it; dropped by the next release.';
COMMENT ON FUNCTION distlock.enqueue_tasks_0_3_0(text, jsonb[], timestamptz, integer, integer, text) IS
    '0.3.0''s enqueue_tasks (no group), kept by the update to 0.4.0 for calls running during it; dropped by the next release.';

CREATE FUNCTION distlock.enqueue_task(
    p_task_name text,
    p_payload jsonb DEFAULT '{}',
    p_run_after timestamp with time zone DEFAULT now(),
    p_priority integer DEFAULT 0,
    p_max_attempts integer DEFAULT 5,
    p_queue text DEFAULT 'default',
    p_unique_key text DEFAULT NULL,
    p_group text DEFAULT NULL,
    p_unique_for interval DEFAULT NULL
) RETURNS bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'enqueue_task_in_group_wrapper';
REVOKE ALL ON FUNCTION distlock.enqueue_task(text, jsonb, timestamptz, integer, integer, text, text, text, interval) FROM PUBLIC;

CREATE FUNCTION distlock.enqueue_tasks(
    p_task_name text,
    p_payloads jsonb[],
    p_run_after timestamp with time zone DEFAULT now(),
    p_priority integer DEFAULT 0,
    p_max_attempts integer DEFAULT 5,
    p_queue text DEFAULT 'default',
    p_group text DEFAULT NULL
) RETURNS SETOF bigint
LANGUAGE c
AS 'MODULE_PATHNAME', 'enqueue_tasks_in_group_wrapper';
REVOKE ALL ON FUNCTION distlock.enqueue_tasks(text, jsonb[], timestamptz, integer, integer, text, text) FROM PUBLIC;

CREATE FUNCTION distlock.consume_task(
    p_worker_id text DEFAULT NULL,
    p_lease interval DEFAULT '5 minutes',
    p_wait interval DEFAULT NULL,
    p_queues text[] DEFAULT NULL
) RETURNS TABLE (
    task_id bigint,
    task_name text,
    payload jsonb,
    attempts integer,
    max_attempts integer,
    lease_expires_at timestamp with time zone,
    priority integer,
    worker_id text,
    queue text,
    group_key text
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'consume_task_with_queue_wrapper';
REVOKE ALL ON FUNCTION distlock.consume_task(text, interval, interval, text[]) FROM PUBLIC;

CREATE FUNCTION distlock.consume_tasks(
    p_batch integer,
    p_worker_id text DEFAULT NULL,
    p_lease interval DEFAULT '5 minutes',
    p_wait interval DEFAULT NULL,
    p_queues text[] DEFAULT NULL
) RETURNS TABLE (
    task_id bigint,
    task_name text,
    payload jsonb,
    attempts integer,
    max_attempts integer,
    lease_expires_at timestamp with time zone,
    priority integer,
    worker_id text,
    queue text,
    group_key text
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'consume_tasks_with_queue_wrapper';
REVOKE ALL ON FUNCTION distlock.consume_tasks(integer, text, interval, interval, text[]) FROM PUBLIC;

CREATE FUNCTION distlock.settle_and_consume_tasks(
    p_batch integer,
    p_worker_id text DEFAULT NULL,
    p_completed bigint[] DEFAULT NULL,
    p_completed_attempts integer[] DEFAULT NULL,
    p_failed bigint[] DEFAULT NULL,
    p_failed_attempts integer[] DEFAULT NULL,
    p_failed_errors text[] DEFAULT NULL,
    p_lease interval DEFAULT '5 minutes',
    p_wait interval DEFAULT NULL,
    p_queues text[] DEFAULT NULL
) RETURNS TABLE (
    task_id bigint,
    task_name text,
    payload jsonb,
    attempts integer,
    max_attempts integer,
    lease_expires_at timestamp with time zone,
    priority integer,
    worker_id text,
    outcome text,
    queue text,
    group_key text
)
LANGUAGE c
AS 'MODULE_PATHNAME', 'settle_and_consume_tasks_with_queue_wrapper';
REVOKE ALL ON FUNCTION distlock.settle_and_consume_tasks(integer, text, bigint[], integer[], bigint[], integer[], text[], interval, interval, text[]) FROM PUBLIC;

DO $same_grants$
DECLARE
    pair record;
    g record;
BEGIN
    FOR pair IN
        SELECT o.oid AS old, n.oid AS new, n.oid::pg_catalog.regprocedure AS signature,
               o.oid::pg_catalog.regprocedure AS old_signature
          FROM (VALUES
                ('distlock.consume_task_0_3_0(text, interval, interval, text[])',
                 'distlock.consume_task(text, interval, interval, text[])'),
                ('distlock.consume_tasks_0_3_0(integer, text, interval, interval, text[])',
                 'distlock.consume_tasks(integer, text, interval, interval, text[])'),
                ('distlock.settle_and_consume_tasks_0_3_0(integer, text, bigint[], integer[], bigint[], integer[], text[], interval, interval, text[])',
                 'distlock.settle_and_consume_tasks(integer, text, bigint[], integer[], bigint[], integer[], text[], interval, interval, text[])'),
                ('distlock.enqueue_task_0_3_0(text, jsonb, timestamptz, integer, integer, text, text)',
                 'distlock.enqueue_task(text, jsonb, timestamptz, integer, integer, text, text, text, interval)'),
                ('distlock.enqueue_tasks_0_3_0(text, jsonb[], timestamptz, integer, integer, text)',
                 'distlock.enqueue_tasks(text, jsonb[], timestamptz, integer, integer, text, text)'))
               AS f(old_name, new_name)
         CROSS JOIN LATERAL pg_catalog.to_regprocedure(f.old_name) o(oid)
         CROSS JOIN LATERAL pg_catalog.to_regprocedure(f.new_name) n(oid)
    LOOP
        -- What CREATE FUNCTION gave (PUBLIC's EXECUTE, default privileges) goes.
        FOR g IN SELECT DISTINCT x.grantee
                   FROM pg_catalog.pg_proc p CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) x
                  WHERE p.oid OPERATOR(pg_catalog.=) pair.new
                    AND x.grantee OPERATOR(pg_catalog.<>) p.proowner LOOP
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s CASCADE', pair.signature,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END);
        END LOOP;
        -- What 0.3.0's had comes over (a dropped role's grants went with it),
        -- granted by the owner: a grant one role made under its grant option
        -- cannot be remade as that role in every setting where the update
        -- runs (SET ROLE is refused to a login that reached superuser by SET
        -- ROLE and inside SECURITY DEFINER functions, and the grant would
        -- run as that role under event triggers), so such grants are named,
        -- since REVOKE ... CASCADE of their grantor no longer reaches them.
        FOR g IN SELECT x.grantor, x.grantee, x.privilege_type, x.is_grantable,
                        x.grantor OPERATOR(pg_catalog.<>) p.proowner AS by_another
                   FROM pg_catalog.pg_proc p CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) x
                  WHERE p.oid OPERATOR(pg_catalog.=) pair.old
                    AND x.grantee OPERATOR(pg_catalog.<>) p.proowner LOOP
            EXECUTE pg_catalog.format('GRANT %s ON FUNCTION %s TO %s%s', g.privilege_type, pair.signature,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END,
                CASE WHEN g.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
            IF g.by_another THEN
                RAISE WARNING 'pg_distlock 0.4.0: % on function % is granted to % by the owner now, not by %',
                    g.privilege_type, pair.signature, pg_catalog.pg_get_userbyid(g.grantee), pg_catalog.pg_get_userbyid(g.grantor)
                    USING HINT = 'REVOKE ... CASCADE of the second role''s grant option no longer takes it back: revoke it by itself when meant.';
            END IF;
        END LOOP;
        -- 0.3.0's, renamed, refuses new calls (src/compat/v0_3_0.rs); its
        -- grants are taken back so that a dump writes none of them (a fresh
        -- install has no such function). Those a role made under a grant
        -- option it still holds another way (a cycle of grant options, a
        -- grantor made superuser) cannot be taken back by the owner: named.
        FOR g IN SELECT DISTINCT x.grantee
                   FROM pg_catalog.pg_proc p CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) x
                  WHERE p.oid OPERATOR(pg_catalog.=) pair.old
                    AND x.grantee OPERATOR(pg_catalog.<>) p.proowner LOOP
            EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM %s CASCADE', pair.old_signature,
                CASE WHEN g.grantee OPERATOR(pg_catalog.=) 0::pg_catalog.oid THEN 'PUBLIC'
                     ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(g.grantee)) END);
        END LOOP;
        FOR g IN SELECT x.grantor, x.grantee
                   FROM pg_catalog.pg_proc p CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) x
                  WHERE p.oid OPERATOR(pg_catalog.=) pair.old
                    AND x.grantee OPERATOR(pg_catalog.<>) p.proowner LOOP
            RAISE WARNING 'pg_distlock 0.4.0: EXECUTE on function % stays granted to % by %',
                pair.old_signature, pg_catalog.pg_get_userbyid(g.grantee), pg_catalog.pg_get_userbyid(g.grantor)
                USING HINT = 'The function refuses new calls; a dump writes this grant, which a restore cannot make: revoke it as its grantor.';
        END LOOP;
    END LOOP;
END
$same_grants$;


-- The capability model gains them: the list replaced, every capable role
-- granted its capabilities again (0.4.0 adds to every capability's list:
-- cron_next with a time zone).
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
    ('any',      'EXECUTE', 'FUNCTION distlock.cron_next(text, timestamptz, text)'),
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
    ('worker',   'EXECUTE', 'FUNCTION distlock.next_task_wait()'),
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
    ('producer', 'EXECUTE', 'FUNCTION distlock.enqueue_task(text, jsonb, timestamptz, integer, integer, text, text, text, interval)'),
    ('producer', 'EXECUTE', 'FUNCTION distlock.enqueue_tasks(text, jsonb[], timestamptz, integer, integer, text, text)'),
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
    ('monitor',  'EXECUTE', 'FUNCTION distlock.rate_limit_keys()'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.queue_counters()'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.lease_backend_connected(integer)'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.lease_backend_alive(integer)'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.lock_owner_published(integer)'),
    ('monitor',  'EXECUTE', 'FUNCTION distlock.lock_owner(integer)'),
    -- Recovery, retention and resets; defining tasks.
    ('admin',    'EXECUTE', 'FUNCTION distlock.check_and_recover_timeout_tasks(integer)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.force_release_lease(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.pause_queue(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.resume_queue(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.set_queue_limit(text, integer)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_rate_limit(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_rate_limits(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_lock_stats()'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.reset_queue_counters(text)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_execution_log(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_jobs(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.retry_dead_jobs(text, bigint[])'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.delete_dead_jobs(text, bigint[])'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.requeue_jobs(text, bigint[])'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.run_task_now(integer)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.purge_queue(text, boolean)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_leases(interval)'),
    ('admin',    'EXECUTE', 'FUNCTION distlock.prune_lock_names(interval)'),
    ('admin',    'SELECT, DELETE', 'distlock.scheduled_tasks'),
    ('admin',    'INSERT (id, task_name, task_type, schedule_cron, is_enabled, next_run_at, timeout, '
                 'max_retries, retry_delay, schedule_timezone, missed_runs, missed_runs_grace, '
                 'missed_runs_max)', 'distlock.scheduled_tasks'),
    ('admin',    'UPDATE (task_name, task_type, schedule_cron, is_enabled, next_run_at, timeout, '
                 'max_retries, retry_delay, consecutive_failures, schedule_timezone, missed_runs, '
                 'missed_runs_grace, missed_runs_max)', 'distlock.scheduled_tasks'),
    ('admin',    'USAGE',   'SEQUENCE distlock.scheduled_tasks_id_seq'),
    ('admin',    'SELECT',  'distlock.task_execution_log, distlock.task_queue, distlock.completed_jobs, distlock.jobs, '
                            'distlock.job_attempts')
) AS g (capability, privilege, object)
WHERE g.capability OPERATOR(pg_catalog.=) ANY (
    CASE p_capability
        WHEN 'admin' THEN ARRAY['any', 'worker', 'producer', 'consumer', 'monitor', 'admin']
        ELSE ARRAY['any', p_capability]
    END);
END
$$;

-- What this update creates is granted to nobody but its owner (and
-- pg_monitor its reads, again below): the owner's ALTER DEFAULT PRIVILEGES
-- would grant the new functions, lock_key_secret and job_attempts to their
-- grantees (an application role given EXECUTE on future functions would
-- call purge_queue, and read the secret and the jobs' errors). Capabilities are granted again below.
-- (The same at install: grants.sql.)
DO $owner_only$
DECLARE
    o record;
BEGIN
    FOR o IN
        SELECT pg_catalog.format('ROUTINE %s', p.oid::pg_catalog.regprocedure) AS object, a.grantee
          FROM pg_catalog.pg_proc p CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
         WHERE p.oid OPERATOR(pg_catalog.=) ANY (ARRAY[
                   'distlock.requeue_jobs(text, bigint[])', 'distlock.run_task_now(integer)',
                   'distlock.purge_queue(text, boolean)', 'distlock.keep_job_ids_unique()',
                   'distlock.rate_limit_keys()', 'distlock.reset_rate_limits(text)',
                   'distlock.refuse_lock_key_secret_change()', 'distlock.lease_backend_connected(integer)',
                   'distlock.lease_backend_alive(integer)', 'distlock.queue_counters()',
                   'distlock.reset_queue_counters(text)', 'distlock.lock_owner_published(integer)',
                   'distlock.lock_owner(integer)', 'distlock.forget_truncated_attempts()',
                   'distlock.cron_next(text, timestamptz, text)',
                   'distlock.next_task_wait()']::pg_catalog.regprocedure[]::pg_catalog.oid[])
           AND a.grantee OPERATOR(pg_catalog.<>) ALL (ARRAY[0, p.proowner]::pg_catalog.oid[])
        UNION
        SELECT pg_catalog.format('TABLE %s', c.oid::pg_catalog.regclass), a.grantee
          FROM pg_catalog.pg_class c CROSS JOIN LATERAL pg_catalog.aclexplode(c.relacl) a
         WHERE c.oid OPERATOR(pg_catalog.=) ANY (ARRAY['distlock.lock_key_secret',
                                                      'distlock.job_attempts']::pg_catalog.regclass[]::pg_catalog.oid[])
           AND a.grantee OPERATOR(pg_catalog.<>) ALL (ARRAY[0, c.relowner]::pg_catalog.oid[])
    LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON %s FROM %s', o.object, o.grantee::pg_catalog.regrole);
    END LOOP;
END
$owner_only$;
-- Nobody but the owner creates in the schema, whoever made it (CREATE
-- EXTENSION does, when it is missing, and the installing role's default
-- privileges on schemas then apply; so does a restore; a 0.3.0 install kept
-- such grants): a role that may
-- create there plants look-alikes of pg_distlock's functions that other
-- tenants' calls resolve to (review 45). What a DBA granted otherwise on
-- the schema (USAGE) is left.
DO $owner_only_schema$
DECLARE
    o record;
BEGIN
    FOR o IN
        SELECT DISTINCT a.grantee
          FROM pg_catalog.pg_namespace n CROSS JOIN LATERAL pg_catalog.aclexplode(n.nspacl) a
         WHERE n.oid OPERATOR(pg_catalog.=) 'distlock'::pg_catalog.regnamespace
           AND a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'
           AND a.grantee OPERATOR(pg_catalog.<>) ALL (ARRAY[0, n.nspowner]::pg_catalog.oid[])
    LOOP
        EXECUTE pg_catalog.format('REVOKE CREATE ON SCHEMA distlock FROM %s CASCADE', o.grantee::pg_catalog.regrole);
    END LOOP;
END
$owner_only_schema$;
-- PUBLIC's too (the install revokes all of PUBLIC's on the schema first).
REVOKE CREATE ON SCHEMA distlock FROM PUBLIC CASCADE;
-- pg_monitor's reads, as granted where these functions are created (without
-- the grant option a default privilege may have added).
GRANT EXECUTE ON FUNCTION distlock.rate_limit_keys(), distlock.lease_backend_connected(integer),
                          distlock.lease_backend_alive(integer), distlock.queue_counters(),
                          distlock.lock_owner_published(integer), distlock.lock_owner(integer) TO pg_monitor;

DO $grant$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT rc.role, rc.capability, rc.scope FROM distlock.role_capabilities rc
              WHERE rc.capability OPERATOR(pg_catalog.=) ANY (ARRAY['admin', 'monitor', 'worker', 'producer', 'consumer']) LOOP
        -- A role dropped without revoke_capability (DROP OWNED, DROP ROLE)
        -- leaves its row, its regrole a bare number that no GRANT takes:
        -- skipped, so that the update goes through.
        IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles r
                        WHERE r.oid OPERATOR(pg_catalog.=) g.role::pg_catalog.oid) THEN
            RAISE WARNING 'pg_distlock: role % no longer exists: its % capability is not granted again',
                g.role::pg_catalog.oid, g.capability
                USING HINT = pg_catalog.format('Delete its row: DELETE FROM distlock.role_capabilities '
                                               'WHERE role::pg_catalog.oid = %s;', g.role::pg_catalog.oid);
            CONTINUE;
        END IF;
        PERFORM distlock.grant_capability(g.role, g.capability, g.scope);
    END LOOP;
END
$grant$;

-- Sessions still running an older library may not write (issue 44, item 6).
-- Created after every write this script makes.
CREATE FUNCTION distlock.library_guard() RETURNS trigger
    AS 'MODULE_PATHNAME', 'distlock_library_guard'
    LANGUAGE c;
REVOKE ALL ON FUNCTION distlock.library_guard() FROM PUBLIC;
-- And from whom the owner's default privileges gave it to ($owner_only$ above).
DO $owner_only_guard$
DECLARE
    o record;
BEGIN
    FOR o IN SELECT a.grantee
               FROM pg_catalog.pg_proc p CROSS JOIN LATERAL pg_catalog.aclexplode(p.proacl) a
              WHERE p.oid OPERATOR(pg_catalog.=) 'distlock.library_guard()'::pg_catalog.regprocedure
                AND a.grantee OPERATOR(pg_catalog.<>) ALL (ARRAY[0, p.proowner]::pg_catalog.oid[]) LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION distlock.library_guard() FROM %s',
                                  o.grantee::pg_catalog.regrole);
    END LOOP;
END
$owner_only_guard$;
-- Sessions still running an older library may not write (src/library_guard.rs):
-- before any statement writes a pg_distlock table, library_guard compares
-- the version of the SQL installed (its argument) with the session's library.
-- Each release's update script drops and recreates these triggers with its
-- own version; a session that loaded an older library is refused (55000, or
-- 42883 for a library before 0.4.0, which has no library_guard). Reads are
-- not guarded.
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.scheduled_tasks
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.task_execution_log
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.task_queue
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.completed_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.job_attempts
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.queue_settings
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.lease_state
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.semaphore_state
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.semaphore_holders
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.leader_state
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.id_generator
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.rate_limit_windows
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.rate_limit_gcra
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.lock_names
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.role_capabilities
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.sweep_state
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');
CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON distlock.lock_key_secret
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard('0.4.0');

-- Last: privileges granted or revoked by an extension script are recorded in
-- pg_init_privs as the extension's own, and pg_dump writes only what differs
-- from them. 0.3.0's update re-granted every capability inside its script,
-- which recorded each capable role's USAGE on schema distlock there (the
-- schema is made by CREATE EXTENSION but is no member of the extension, so
-- 0.3.0's clean-up, which walked the members, missed it): a dump left the
-- grant out and a restored database refused every call of that role. What a
-- fresh install records, for the schema and for every member, is the
-- owner's and pg_monitor's privileges alone; everything else is taken out.
WITH owned AS (
    SELECT d.classid, d.objid, e.extowner
      FROM pg_catalog.pg_depend d
      JOIN pg_catalog.pg_extension e ON e.oid OPERATOR(pg_catalog.=) d.refobjid
     WHERE d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND e.extname OPERATOR(pg_catalog.=) 'pg_distlock'
       AND d.deptype OPERATOR(pg_catalog.=) 'e'
    UNION ALL
    SELECT 'pg_catalog.pg_namespace'::pg_catalog.regclass, e.extnamespace, e.extowner
      FROM pg_catalog.pg_extension e
     WHERE e.extname OPERATOR(pg_catalog.=) 'pg_distlock'
),
kept AS (
    SELECT ip.objoid, ip.classoid, ip.objsubid,
           (SELECT pg_catalog.array_agg(u.item ORDER BY u.position)
              FROM pg_catalog.unnest(ip.initprivs) WITH ORDINALITY AS u(item, position)
             WHERE (SELECT x.grantee FROM pg_catalog.aclexplode(ARRAY[u.item]) x LIMIT 1)
                   OPERATOR(pg_catalog.=) ANY (ARRAY[o.extowner, 'pg_monitor'::pg_catalog.regrole::pg_catalog.oid])) AS initprivs
      FROM pg_catalog.pg_init_privs ip
      JOIN owned o ON o.classid OPERATOR(pg_catalog.=) ip.classoid AND o.objid OPERATOR(pg_catalog.=) ip.objoid
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
