-- pg_distlock 0.1.0 -> 0.2.0, run by ALTER EXTENSION pg_distlock UPDATE.
-- Every schema change since 0.1.0 is here as well as in the install script
-- that sql/*.sql and src/ generate; tests/cluster/upgrade.rs checks that a
-- 0.1.0 database updated with this script equals a fresh 0.2.0 install
-- (tests/cluster/schema_fingerprint.sql) and keeps its data.
\echo Use "ALTER EXTENSION pg_distlock UPDATE TO '0.2.0'" to load this file. \quit

-- Queue: settle a given attempt (the `attempts` consume_task returned), so a
-- consumer whose lease expired cannot complete or fail the next attempt of
-- the same job, even under the same worker id. New overloads: the 0.1.0
-- forms keep their signatures, defaults and grants.
CREATE FUNCTION distlock.complete_task(p_task_id bigint, p_worker_id text, p_attempt int)
RETURNS bool
SET search_path TO pg_catalog, pg_temp
LANGUAGE c AS 'MODULE_PATHNAME', 'complete_attempt_wrapper';

CREATE FUNCTION distlock.fail_task(p_task_id bigint, p_error text, p_worker_id text, p_attempt int)
RETURNS bool
SET search_path TO pg_catalog, pg_temp
LANGUAGE c AS 'MODULE_PATHNAME', 'fail_attempt_wrapper';

CREATE FUNCTION distlock.extend_task_lease(p_task_id bigint, p_lease interval, p_worker_id text, p_attempt int)
RETURNS bool
SET search_path TO pg_catalog, pg_temp
LANGUAGE c AS 'MODULE_PATHNAME', 'extend_attempt_lease_wrapper';

REVOKE ALL ON FUNCTION distlock.complete_task(bigint, text, int),
                       distlock.fail_task(bigint, text, text, int),
                       distlock.extend_task_lease(bigint, interval, text, int) FROM PUBLIC;

-- Tasks: retry_delay is at most 1 hour (retries never wait longer, and
-- doubling a huge delay overflowed the interval type). Existing rows are
-- left as they are; releases cap the delay they read.
CREATE OR REPLACE FUNCTION distlock.scheduled_tasks_check() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    next_slot timestamptz;
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
    IF NEW.schedule_cron IS NULL THEN
        RETURN NEW;
    END IF;
    next_slot := distlock.cron_next(NEW.schedule_cron, now());
    IF TG_OP = 'INSERT' THEN
        IF NEW.next_run_at IS NULL THEN
            NEW.next_run_at := next_slot;
        END IF;
    ELSIF NEW.schedule_cron IS DISTINCT FROM OLD.schedule_cron
          AND NEW.next_run_at IS NOT DISTINCT FROM OLD.next_run_at THEN
        NEW.next_run_at := next_slot;
    END IF;
    RETURN NEW;
END
$$;

-- Queue: task names and worker ids obey the one rule for names (not blank,
-- at most 1000 bytes, checked by the functions before writing), so the
-- columns lose their narrower varchar limits. varchar -> text rewrites
-- nothing; queue_stats depends on task_name, so it is rebuilt, and every
-- privilege on it, users' grants included, is given back.
CREATE TEMPORARY TABLE distlock_queue_stats_acl AS
SELECT a.grantee, a.privilege_type, a.is_grantable
  FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
 WHERE c.oid OPERATOR(pg_catalog.=) 'distlock.queue_stats'::pg_catalog.regclass;

DROP VIEW distlock.queue_stats;

ALTER TABLE distlock.task_queue
    ALTER COLUMN task_name TYPE text,
    ALTER COLUMN worker_id TYPE text;

CREATE VIEW distlock.queue_stats AS
SELECT q.task_name,
       q.status,
       count(*) AS jobs,
       pg_catalog.now() - min(q.created_at) FILTER (WHERE q.status = 'pending') AS oldest_pending_age,
       min(q.run_after) FILTER (WHERE q.status IN ('pending', 'failed')) AS next_run_after,
       count(*) FILTER (WHERE q.status = 'processing'
                          AND q.lease_expires_at <= pg_catalog.now()) AS expired_leases
  FROM distlock.task_queue q
 GROUP BY q.task_name, q.status;

COMMENT ON VIEW distlock.queue_stats IS
    'Jobs per task name and status, with the age of the oldest pending job.';

DO $$
DECLARE
    item record;
BEGIN
    REVOKE ALL ON distlock.queue_stats FROM PUBLIC;
    FOR item IN SELECT * FROM distlock_queue_stats_acl LOOP
        EXECUTE pg_catalog.format('GRANT %s ON distlock.queue_stats TO %s%s',
            item.privilege_type,
            CASE WHEN item.grantee OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'
                 ELSE pg_catalog.quote_ident(pg_catalog.pg_get_userbyid(item.grantee)) END,
            CASE WHEN item.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;

DROP TABLE distlock_queue_stats_acl;

-- Retention: functions that delete what only grew (finished jobs, expired
-- leases, leaderships and semaphore slots, lock names), for pg_cron.
CREATE FUNCTION distlock.prune_jobs(p_older_than interval DEFAULT '7 days')
RETURNS bigint
SET search_path TO pg_catalog, pg_temp
LANGUAGE c AS 'MODULE_PATHNAME', 'prune_jobs_wrapper';

CREATE FUNCTION distlock.prune_leases(p_older_than interval DEFAULT '1 day')
RETURNS bigint
SET search_path TO pg_catalog, pg_temp
LANGUAGE c AS 'MODULE_PATHNAME', 'prune_leases_wrapper';

CREATE FUNCTION distlock.prune_lock_names(p_older_than interval DEFAULT '30 days')
RETURNS bigint
SET search_path TO pg_catalog, pg_temp
LANGUAGE c AS 'MODULE_PATHNAME', 'prune_lock_names_wrapper';

REVOKE ALL ON FUNCTION distlock.prune_jobs(interval),
                       distlock.prune_leases(interval),
                       distlock.prune_lock_names(interval) FROM PUBLIC;

-- Tasks: task locks held with no committed claim (an uncommitted claim or a
-- foreign advisory lock on a task key) are shown; the sweep reads this view
-- to end claims left in transactions that never finish.
CREATE VIEW distlock.blocked_tasks AS
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
 WHERE NOT EXISTS (SELECT 1 FROM distlock.task_execution_log r
                    WHERE r.task_id = h.task_id
                      AND r.status = 'running'
                      AND r.holder_pid = h.pid);

COMMENT ON VIEW distlock.blocked_tasks IS
    'Task locks held without a committed running claim (an uncommitted claim or a foreign advisory lock).';

GRANT SELECT ON distlock.blocked_tasks TO pg_monitor;
