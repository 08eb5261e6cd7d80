-- params: integer
-- The backend recorded for task $1's lease-mode claim (the one that made it
-- or last renewed it), with the task's name and type for the caller's scope.
SELECT t.lease_backend_pid, t.lease_backend_start, t.task_name, t.task_type
  FROM distlock.scheduled_tasks t
 WHERE t.id OPERATOR(pg_catalog.=) $1
