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
    CONSTRAINT scheduled_tasks_task_name_not_blank CHECK (btrim(task_name) <> ''),
    CONSTRAINT scheduled_tasks_task_type_not_blank CHECK (btrim(task_type) <> ''),
    CONSTRAINT scheduled_tasks_timeout_positive CHECK (timeout IS NULL OR timeout > interval '0'),
    CONSTRAINT scheduled_tasks_max_retries_range CHECK (max_retries BETWEEN 0 AND 1000),
    CONSTRAINT scheduled_tasks_retry_delay_positive CHECK (retry_delay > interval '0'),
    CONSTRAINT scheduled_tasks_consecutive_failures_nonnegative CHECK (consecutive_failures >= 0),
    CONSTRAINT scheduled_tasks_last_status_known CHECK (
        last_status IS NULL
        OR last_status IN ('completed', 'failed', 'timed_out', 'abandoned'))
);

COMMENT ON TABLE distlock.scheduled_tasks IS
    'Scheduled tasks that pg_distlock hands out to workers, at most one claim per task at a time.';

-- Due-task lookups by worker_fetch_and_execute_task and try_acquire_multiple_tasks.
CREATE INDEX scheduled_tasks_due_idx
    ON distlock.scheduled_tasks (next_run_at, id)
    WHERE is_enabled;

CREATE TABLE distlock.task_execution_log (
    id                   bigserial PRIMARY KEY,
    task_id              int NOT NULL REFERENCES distlock.scheduled_tasks (id) ON DELETE CASCADE,
    worker_id            text NOT NULL,
    status               text NOT NULL,
    started_at           timestamptz NOT NULL DEFAULT now(),
    completed_at         timestamptz,
    error_message        text,
    -- The advisory lock key the claim held: (distlock.task_lock_class() << 32) | task_id.
    lock_id              bigint,
    holder_pid           int,
    holder_backend_start timestamptz,
    fencing_token        bigint UNIQUE,
    attempt              int NOT NULL DEFAULT 1,
    -- next_run_at of the task when it was claimed: the due slot this run serves.
    scheduled_for        timestamptz,
    CONSTRAINT task_execution_log_status_known CHECK (
        status IN ('running', 'completed', 'failed', 'timed_out', 'abandoned')),
    CONSTRAINT task_execution_log_finished_has_completed_at CHECK (
        (status = 'running') = (completed_at IS NULL)),
    CONSTRAINT task_execution_log_attempt_positive CHECK (attempt >= 1)
);

COMMENT ON TABLE distlock.task_execution_log IS
    'One row per claim of a scheduled task: who ran it, when, and how it ended.';

-- The sweep, release and running_tasks read only running rows.
CREATE INDEX task_execution_log_running_idx
    ON distlock.task_execution_log (task_id, holder_pid)
    WHERE status = 'running';

-- task_stats and prune_execution_log.
CREATE INDEX task_execution_log_task_started_idx
    ON distlock.task_execution_log (task_id, started_at);
CREATE INDEX task_execution_log_finished_idx
    ON distlock.task_execution_log (completed_at)
    WHERE status <> 'running';

-- Validates schedule_cron when a row is written and fills in next_run_at:
-- on insert when it was left NULL, on update when the cron changed and
-- next_run_at was not set in the same statement.
CREATE FUNCTION distlock.scheduled_tasks_apply_cron() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    next_slot timestamptz;
BEGIN
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

CREATE TRIGGER scheduled_tasks_apply_cron
    BEFORE INSERT OR UPDATE OF schedule_cron ON distlock.scheduled_tasks
    FOR EACH ROW EXECUTE FUNCTION distlock.scheduled_tasks_apply_cron();
