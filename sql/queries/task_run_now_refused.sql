-- params: integer
-- Whether task $1, whose row task_run_now_lock.sql found held by another
-- transaction or not at all, is enabled (no row: no such task).
SELECT t.is_enabled
  FROM distlock.scheduled_tasks t
 WHERE t.id OPERATOR(pg_catalog.=) $1
