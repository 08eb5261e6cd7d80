-- params: bigint
-- The name and queue of job $1, unfinished or completed (no row: no such
-- job).
SELECT task_name, queue FROM distlock.task_queue WHERE id OPERATOR(pg_catalog.=) $1
UNION ALL
SELECT task_name, queue FROM distlock.completed_jobs WHERE id OPERATOR(pg_catalog.=) $1
