-- params: integer, boolean, text, interval, oid
-- claim_task_lease.sql for SQL older than 0.4.0, whose task rows do not
-- record the backend that made or renewed a lease-mode claim.
-- Claims task $1 in lease mode for worker $3 of role $5: the claim is the
-- task row's lease, $4 from now, rather than a session lock, so any
-- connection may renew or release it. The caller holds the task's lock for
-- this transaction, so no session claim of the task is alive; the task is
-- taken when it is enabled (and due, when $2) and has no live lease. Running
-- log rows of the task (an expired lease, a session claim whose holder is
-- gone) are superseded: marked abandoned, so their slot runs again here;
-- the third column says how many (the caller counts them in runs_abandoned).
-- The token is drawn under the task row's lock, after every earlier claim's.
WITH claimed AS (
    SELECT pg_catalog.clock_timestamp() AS at
),
task AS (
    UPDATE distlock.scheduled_tasks t
       SET last_run_at = c.at,
           current_token = pg_catalog.nextval('distlock.fencing_token_seq'),
           lease_expires_at = c.at OPERATOR(pg_catalog.+) $4
      FROM claimed c
     WHERE t.id OPERATOR(pg_catalog.=) $1
       AND t.is_enabled
       AND (NOT $2 OR t.next_run_at OPERATOR(pg_catalog.<=) c.at)
       AND (t.lease_expires_at IS NULL OR t.lease_expires_at OPERATOR(pg_catalog.<=) c.at)
 RETURNING t.id, t.current_token, t.consecutive_failures, t.next_run_at, t.last_run_at
),
superseded AS (
    UPDATE distlock.task_execution_log l
       SET status = 'abandoned',
           completed_at = t.last_run_at,
           error_message = 'superseded by the lease-mode claim with token '
                           OPERATOR(pg_catalog.||) t.current_token::pg_catalog.text
                           OPERATOR(pg_catalog.||) ': its lease ran out or its holder is gone'
      FROM task t
     WHERE l.task_id OPERATOR(pg_catalog.=) t.id
       AND l.status OPERATOR(pg_catalog.=) 'running'
    RETURNING l.id
)
INSERT INTO distlock.task_execution_log
       (task_id, worker_id, status, started_at, fencing_token, attempt, scheduled_for, holder_role)
SELECT id, $3, 'running', last_run_at, current_token,
       consecutive_failures OPERATOR(pg_catalog.+) 1, next_run_at, $5
  FROM task
RETURNING id, fencing_token, (SELECT pg_catalog.count(*) FROM superseded)
