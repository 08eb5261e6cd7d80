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
    IF NEW.task_name IS NULL OR btrim(NEW.task_name) = '' THEN
        RAISE EXCEPTION 'task_name must not be empty, got "%"', NEW.task_name USING ERRCODE = 'check_violation';
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
