-- params: integer
-- The backend recorded for task $1's lease-mode claim (the one that made it
-- or last renewed it), with the task's name and type for the caller's scope;
-- no backend once the task has no lease (released or recovered claims leave
-- the columns as they were).
SELECT CASE WHEN t.lease_expires_at IS NOT NULL THEN t.lease_backend_pid END,
       t.lease_backend_start, t.task_name, t.task_type
  FROM distlock.scheduled_tasks t
 WHERE t.id OPERATOR(pg_catalog.=) $1
