-- params: integer
-- Makes task $1 due now, when it is enabled, no claim runs it and it is
-- not due already; its schedule stays as it is (the run's slot is now, and
-- the release schedules the next from the schedule as always). A row when
-- it was made due.
UPDATE distlock.scheduled_tasks t
   SET next_run_at = pg_catalog.now()
 WHERE t.id OPERATOR(pg_catalog.=) $1
   AND t.is_enabled
   AND t.current_token IS NULL
   AND (t.next_run_at IS NULL OR t.next_run_at OPERATOR(pg_catalog.>) pg_catalog.now())
RETURNING true
