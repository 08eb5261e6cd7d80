-- params: bigint
-- 0.2.0's tables (no completed_jobs): the job is completed in place.
SELECT true FROM distlock.task_queue WHERE id OPERATOR(pg_catalog.=) $1
