-- params: bigint
SELECT true FROM distlock.task_queue WHERE id OPERATOR(pg_catalog.=) $1
UNION ALL
SELECT true FROM distlock.completed_jobs WHERE id OPERATOR(pg_catalog.=) $1
