-- params: integer
-- Whether task $1, which task_run_now.sql did not make due, is enabled (no
-- row: no such task; enabled: a claim runs it, or it is due already).
SELECT t.is_enabled
  FROM distlock.scheduled_tasks t
 WHERE t.id OPERATOR(pg_catalog.=) $1
