-- params: integer
-- Locks task $1's row for run_task_now, when no other transaction holds it
-- (a claim or a release in flight, a prepared transaction: no row, at
-- once), and reads its latest version: whether it is enabled, whether a
-- claim runs it by its lease (true: a lease not yet expired; NULL: a
-- session-mode claim, alive while its backend holds the task's lock), and
-- whether it is due already. Judged by the clock, not the transaction's
-- start. Once the row is locked, no claim can start or end until this
-- transaction does.
SELECT t.is_enabled,
       CASE WHEN t.current_token IS NULL THEN false
            WHEN t.lease_expires_at IS NULL THEN NULL
            ELSE t.lease_expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp() END,
       t.next_run_at IS NOT NULL AND t.next_run_at OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
  FROM distlock.scheduled_tasks t
 WHERE t.id OPERATOR(pg_catalog.=) $1
   FOR NO KEY UPDATE SKIP LOCKED
