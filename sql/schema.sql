-- Tables, sequences and indexes of the scheduled-task lock service.
-- Everything is schema-qualified; the extension's schema is fixed (distlock).

-- One sequence hands out every fencing token, so tokens strictly increase
-- across all tasks and are never reused, even after log rows are pruned.
CREATE SEQUENCE distlock.fencing_token_seq AS bigint;

CREATE TABLE distlock.scheduled_tasks (
    id                   serial PRIMARY KEY,
    task_name            text NOT NULL UNIQUE,
    task_type            text NOT NULL,
    schedule_cron        text,
    is_enabled           boolean NOT NULL DEFAULT true,
    last_run_at          timestamptz,
    next_run_at          timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    -- A run older than this is timed out by the sweep; NULL uses the sweep's argument.
    timeout              interval,
    -- Retries allowed after a failure of one due slot before waiting for the next cron slot.
    max_retries          int NOT NULL DEFAULT 3,
    -- First retry delay; doubles with each consecutive failure (capped at one hour), with jitter.
    retry_delay          interval NOT NULL DEFAULT interval '10 seconds',
    consecutive_failures int NOT NULL DEFAULT 0,
    last_status          text,
    -- Fencing token of the claim that currently runs the task; NULL when none does.
    current_token        bigint,
    -- When the current claim's lease runs out unless renewed, for a claim
    -- made in lease mode; NULL for a session claim and when none runs.
    lease_expires_at     timestamptz,
    -- Runs ended with each status, counted by the release that ends them:
    -- totals that only grow, for metrics (the log is pruned).
    runs_completed       bigint NOT NULL DEFAULT 0,
    runs_failed          bigint NOT NULL DEFAULT 0,
    runs_timed_out       bigint NOT NULL DEFAULT 0,
    runs_abandoned       bigint NOT NULL DEFAULT 0,
    -- For a claim in lease mode: the backend that made the claim or last
    -- renewed its lease, and when that backend started (pid and start name
    -- one session even after the pid is reused). running_tasks shows
    -- whether it is still connected: a worker killed with its claim leaves
    -- a live lease and a gone backend. Written by the statements that
    -- already lock this row (claim, renewal), so no new lock order.
    lease_backend_pid    int,
    lease_backend_start  timestamptz,
    -- The time zone whose wall clock schedule_cron follows (an IANA name
    -- such as Europe/Berlin); NULL: the setting distlock.timezone (UTC
    -- unless set). 0.4.0.
    schedule_timezone    text,
    -- What a fetch does with the slots a task missed while no worker claimed
    -- it (docs/tasks.md, "Missed runs"; 0.4.0): 'once' runs one run for
    -- them all, 'skip' skips those older than missed_runs_grace, 'all' runs
    -- each in turn, at most the newest missed_runs_max (NULL: every one).
    missed_runs          text NOT NULL DEFAULT 'once',
    missed_runs_grace    interval,
    missed_runs_max      int,
    -- Slots skipped under missed_runs, counted as the runs_ counters are.
    runs_skipped         bigint NOT NULL DEFAULT 0,
    -- While a failed run's retries are pending: the slot they serve (the
    -- first attempt's), from which missed_runs 'all' schedules the next.
    -- Kept here rather than looked up in the log, which may be pruned.
    retry_slot           timestamptz
    -- Validated by the trigger below rather than CHECK constraints: PostgreSQL
    -- re-reads every CHECK on each claim's and release's UPDATE, which made
    -- them a fifth of a claim's cost; the trigger runs only when a user edits
    -- the columns it checks.
);

COMMENT ON TABLE distlock.scheduled_tasks IS
    'Scheduled tasks that pg_distlock hands out to workers, at most one claim per task at a time.';

-- Due-task lookups by worker_fetch_and_execute_task and try_acquire_multiple_tasks.
CREATE INDEX scheduled_tasks_due_idx
    ON distlock.scheduled_tasks (next_run_at, id)
    WHERE is_enabled;

-- A domain rather than a table CHECK: PostgreSQL caches domain constraints,
-- while it re-reads table CHECKs on every insert and update of the log.
CREATE DOMAIN distlock.run_status AS text
    CONSTRAINT run_status_known
    CHECK (VALUE IN ('running', 'completed', 'failed', 'timed_out', 'abandoned', 'skipped'));

CREATE TABLE distlock.task_execution_log (
    id                   bigserial PRIMARY KEY,
    task_id              int NOT NULL REFERENCES distlock.scheduled_tasks (id) ON DELETE CASCADE,
    worker_id            text NOT NULL,
    status               distlock.run_status NOT NULL,
    started_at           timestamptz NOT NULL DEFAULT now(),
    completed_at         timestamptz,
    error_message        text,
    -- The advisory lock key the claim held: (distlock.task_lock_class() << 32) | task_id.
    lock_id              bigint,
    holder_pid           int,
    holder_backend_start timestamptz,
    -- From distlock.fencing_token_seq, hence unique without an index.
    fencing_token        bigint,
    attempt              int NOT NULL DEFAULT 1,
    -- next_run_at of the task when it was claimed: the due slot this run serves.
    -- completed_at is NULL exactly while status is 'running' (every writer
    -- sets both; finish_claim.sql relies on it).
    scheduled_for        timestamptz,
    -- The role that claimed the run (an OID, see lease_state).
    holder_role          oid
);

COMMENT ON TABLE distlock.task_execution_log IS
    'One row per claim of a scheduled task: who ran it, when, and how it ended.';

-- The sweep, release and running_tasks read only running rows. Every claim
-- writes the log twice, so it carries no other index: task_stats reads the
-- whole log anyway, and prune_execution_log (daily) may scan it.
CREATE INDEX task_execution_log_running_idx
    ON distlock.task_execution_log (task_id, holder_pid)
    WHERE status = 'running';

-- Validates what users write into scheduled_tasks, and fills in next_run_at
-- from schedule_cron: on insert when it was left NULL, on update when the
-- cron changed and next_run_at was not set in the same statement.
CREATE FUNCTION distlock.scheduled_tasks_check() RETURNS trigger
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

CREATE TRIGGER scheduled_tasks_check
    BEFORE INSERT OR UPDATE OF task_name, task_type, schedule_cron, timeout, max_retries, retry_delay,
                               schedule_timezone, missed_runs, missed_runs_grace, missed_runs_max
    ON distlock.scheduled_tasks
    FOR EACH ROW EXECUTE FUNCTION distlock.scheduled_tasks_check();
