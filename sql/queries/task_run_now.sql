-- params: integer
-- Makes task $1 due now, when it is enabled, no live claim runs it (a
-- lease not yet expired, or a session claim whose backend holds the task's
-- lock) and it is not due already; its schedule stays as it is (the run's slot is now,
-- and the release schedules the next from the schedule as always). A row
-- when it was made due. A row another transaction holds (a claim or a
-- release in flight, a prepared transaction) is skipped, not waited for:
-- the call answers false at once. Due "already" and a lease's expiry are
-- judged by the clock, not the transaction's start.
WITH task AS (
    SELECT t.id
      FROM distlock.scheduled_tasks t
     WHERE t.id OPERATOR(pg_catalog.=) $1
       FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE distlock.scheduled_tasks t
   SET next_run_at = pg_catalog.now()
  FROM task
 WHERE t.id OPERATOR(pg_catalog.=) task.id
   AND t.is_enabled
   AND (t.current_token IS NULL
        OR CASE WHEN t.lease_expires_at IS NOT NULL
                THEN t.lease_expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
                -- A session-mode claim lives while its backend holds the
                -- task's lock (as running_tasks.holder_alive judges): one
                -- whose backend died, or let its locks go (a pooler's
                -- DISCARD ALL), runs nothing until the sweep ends it.
                ELSE NOT EXISTS (
                    SELECT 1
                      FROM distlock.task_execution_log r
                      JOIN distlock.task_lock_holders h
                        ON h.task_id OPERATOR(pg_catalog.=) r.task_id AND h.pid OPERATOR(pg_catalog.=) r.holder_pid
                     WHERE r.task_id OPERATOR(pg_catalog.=) t.id
                       AND r.status OPERATOR(pg_catalog.=) 'running'
                       AND r.fencing_token OPERATOR(pg_catalog.=) t.current_token) END)
   AND (t.next_run_at IS NULL OR t.next_run_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
RETURNING true
