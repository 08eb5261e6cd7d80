-- params: none
-- Due, enabled tasks, earliest slot first. Claims re-check each one after
-- taking its lock, so this snapshot may be stale.
SELECT id, task_name, task_type
  FROM distlock.scheduled_tasks
 WHERE is_enabled
   AND next_run_at OPERATOR(pg_catalog.<=) pg_catalog.now()
 ORDER BY next_run_at, id
