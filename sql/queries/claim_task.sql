-- params: integer, boolean, text, timestamptz, oid
-- Claims a task whose lock this backend has just taken: re-checks, on the
-- latest committed row version, that the task is enabled (and due when $2),
-- hands out the next fencing token and logs the run.
-- $1 task id, $2 only if due, $3 worker id, $4 holder backend start,
-- $5 the claiming role.
-- The run's lock_id is the key of the claim's own lock (task id << 32 | the
-- token's low 32 bits), which this backend takes next: it tells a fencing
-- check that the claim has one (claims of libraries before 0.4.0 logged the
-- task lock's key, class << 32 | task id).
-- The claim's time is its own (clock_timestamp), not its transaction's start.
WITH claimed AS (
    SELECT pg_catalog.clock_timestamp() AS at
),
task AS (
    UPDATE distlock.scheduled_tasks
       SET last_run_at = (SELECT c.at FROM claimed c),
           current_token = pg_catalog.nextval('distlock.fencing_token_seq'),
           lease_expires_at = NULL
     WHERE id OPERATOR(pg_catalog.=) $1
       AND is_enabled
       AND (NOT $2 OR next_run_at OPERATOR(pg_catalog.<=) (SELECT c.at FROM claimed c))
       -- Not while a lease-mode claim's lease lasts (an expired one's log
       -- row is then abandoned by the sweep).
       AND (lease_expires_at IS NULL OR lease_expires_at OPERATOR(pg_catalog.<=) (SELECT c.at FROM claimed c))
 RETURNING id, current_token, consecutive_failures, next_run_at, last_run_at
)
INSERT INTO distlock.task_execution_log
       (task_id, worker_id, status, started_at, lock_id, holder_pid, holder_backend_start,
        fencing_token, attempt, scheduled_for, holder_role)
SELECT id, $3, 'running', last_run_at,
       (id::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32) OPERATOR(pg_catalog.|) (current_token OPERATOR(pg_catalog.&) 4294967295),
       pg_catalog.pg_backend_pid(), $4,
       current_token, consecutive_failures OPERATOR(pg_catalog.+) 1, next_run_at, $5
  FROM task
RETURNING id, fencing_token
