-- params: bigint
-- The name, queue and holder's role of job $1, unfinished or completed (no
-- row: no such job).
SELECT task_name, queue, holder_role FROM distlock.task_queue WHERE id OPERATOR(pg_catalog.=) $1
UNION ALL
SELECT task_name, queue, holder_role FROM distlock.completed_jobs WHERE id OPERATOR(pg_catalog.=) $1
