-- params: bigint
-- queue_job_name.sql for 0.2.0's tables (no completed_jobs).
SELECT task_name FROM distlock.task_queue WHERE id OPERATOR(pg_catalog.=) $1
