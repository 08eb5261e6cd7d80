-- params: timestamptz, integer
-- (For a database whose tables are still 0.3.0's: no missed_runs.)
-- The next 8 due, enabled tasks from slot ($1, $2) on (inclusive), earliest
-- slot first, leaving out those whose lease-mode claim is live: a lease keeps
-- its task due until it is released, and every fetch would otherwise try
-- each leased task again. Read in pages of a constant size rather than by a
-- cursor, whose plan is made for reading every row: with many tasks due at
-- once that plan sorts them all on each fetch. Claims re-check each task
-- after taking its lock, so this snapshot may be stale.
SELECT id, task_name, task_type, next_run_at
  FROM distlock.scheduled_tasks
 WHERE is_enabled
   AND next_run_at OPERATOR(pg_catalog.<=) pg_catalog.now()
   AND (next_run_at, id) OPERATOR(pg_catalog.>=) ($1, $2)
   AND (lease_expires_at IS NULL OR lease_expires_at OPERATOR(pg_catalog.<=) pg_catalog.now())
 ORDER BY next_run_at, id
 LIMIT 8
