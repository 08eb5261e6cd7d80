-- params: integer, timestamptz, timestamptz, timestamptz[], bigint, text, text, oid
-- Skips missed slots of task $1 (src/tasks/missed.rs): when its due slot is
-- still $2 (read again on the row's latest version, under the task's lock),
-- moves it to slot $3 (NULL: none) and logs each slot of $4 with status
-- skipped, served by no run; $5 slots were skipped in all, of which $4 lists
-- the oldest (the last row says how many more). $6 is why, $7 the fetching
-- worker, $8 its role. A slot skipped is a new start: the task's failures
-- so far count no more.
-- Not while a lease-mode claim's lease lasts: that claim serves the slot.
-- The row is locked first, SKIP LOCKED: another transaction holding it (a
-- skip it has not committed) is not waited for, and the answer, whether
-- the row was free, tells the caller to pass the task over (its claim would
-- wait on the row just the same).
WITH skipped_at AS (
    SELECT pg_catalog.clock_timestamp() AS at
),
locked AS (
    SELECT t.id, t.next_run_at, t.is_enabled, t.lease_expires_at
      FROM distlock.scheduled_tasks t
     WHERE t.id OPERATOR(pg_catalog.=) $1
       FOR NO KEY UPDATE SKIP LOCKED
),
task AS (
    UPDATE distlock.scheduled_tasks t
       SET next_run_at = $3,
           consecutive_failures = 0,
           retry_slot = NULL,
           runs_skipped = t.runs_skipped OPERATOR(pg_catalog.+) $5
      FROM skipped_at s, locked l
     WHERE t.id OPERATOR(pg_catalog.=) l.id
       AND l.next_run_at OPERATOR(pg_catalog.=) $2
       AND l.is_enabled
       AND (l.lease_expires_at IS NULL OR l.lease_expires_at OPERATOR(pg_catalog.<=) s.at)
    RETURNING t.id
),
logged AS (
    INSERT INTO distlock.task_execution_log
           (task_id, worker_id, status, started_at, completed_at, error_message, scheduled_for, holder_role)
    SELECT t.id, $7, 'skipped', s.at, s.at,
           CASE WHEN slot.n OPERATOR(pg_catalog.=) pg_catalog.cardinality($4)
                     AND $5 OPERATOR(pg_catalog.>) pg_catalog.cardinality($4)
                THEN $6 OPERATOR(pg_catalog.||) ' (and '
                     OPERATOR(pg_catalog.||) ($5 OPERATOR(pg_catalog.-) pg_catalog.cardinality($4))::pg_catalog.text
                     OPERATOR(pg_catalog.||) ' later slots, skipped too, not logged one by one)'
                ELSE $6
           END,
           slot.at, $8
      FROM task t, skipped_at s, pg_catalog.unnest($4) WITH ORDINALITY AS slot (at, n)
    RETURNING 1
)
SELECT EXISTS (SELECT FROM locked), (SELECT pg_catalog.count(*) FROM logged)
