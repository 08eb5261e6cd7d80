-- params: integer
SELECT task_name, task_type FROM distlock.scheduled_tasks WHERE id OPERATOR(pg_catalog.=) $1
