-- params: bigint
-- queue_job_name.sql for 0.2.0's tables (no completed_jobs, no queues: every
-- job was in the default queue; no holder roles).
SELECT task_name, 'default'::pg_catalog.text, NULL::pg_catalog.oid
  FROM distlock.task_queue WHERE id OPERATOR(pg_catalog.=) $1
