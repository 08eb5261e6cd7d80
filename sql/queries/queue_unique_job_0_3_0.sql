-- params: text, text
-- queue_unique_job.sql for SQL older than 0.4.0, whose jobs have no group_key.
-- The unfinished job of queue $1 with unique key $2, if any, and its name
-- (the caller may only be told of a job in its producer scope).
SELECT id, task_name
  FROM distlock.task_queue
 WHERE queue OPERATOR(pg_catalog.=) $1
   AND unique_key OPERATOR(pg_catalog.=) $2
   AND status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed', 'processing'])
