-- params: timestamptz, integer
-- The next 8 enabled tasks that no claim runs, earliest next_run_at first,
-- from ($1, $2) on (inclusive), each with how long until it is due (0 once
-- it is), by this statement's clock. A task a claim runs (current_token
-- set) is left out: it comes due again only when the claim ends, and an
-- idle worker told "due now" for it would poll without pause.
SELECT id, task_name, task_type, next_run_at,
       GREATEST(next_run_at OPERATOR(pg_catalog.-) pg_catalog.clock_timestamp(), interval '0')
  FROM distlock.scheduled_tasks
 WHERE is_enabled
   AND current_token IS NULL
   AND next_run_at IS NOT NULL
   AND (next_run_at, id) OPERATOR(pg_catalog.>=) ($1, $2)
 ORDER BY next_run_at, id
 LIMIT 8
