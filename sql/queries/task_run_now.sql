-- params: integer
-- Makes task $1 due now, when it is enabled, no live claim runs it and it
-- is not due already; its schedule stays as it is (the run's slot is now,
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
        OR (t.lease_expires_at IS NOT NULL AND t.lease_expires_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()))
   AND (t.next_run_at IS NULL OR t.next_run_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
RETURNING true
