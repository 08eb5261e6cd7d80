-- params: bigint
SELECT true FROM distlock.task_queue WHERE id OPERATOR(pg_catalog.=) $1
