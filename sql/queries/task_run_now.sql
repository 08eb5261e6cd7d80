-- params: integer
-- Makes task $1 due now; its schedule stays as it is (the run's slot is
-- now, and the release schedules the next from the schedule as always).
-- run_now.rs has locked the row and judged that it may (task_run_now_lock.sql).
UPDATE distlock.scheduled_tasks t
   SET next_run_at = pg_catalog.now()
 WHERE t.id OPERATOR(pg_catalog.=) $1
