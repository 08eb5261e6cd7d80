-- params: integer
SELECT true FROM distlock.scheduled_tasks WHERE id OPERATOR(pg_catalog.=) $1
