-- params: text, text
-- The unfinished job of queue $1 with unique key $2, if any, its name and
-- its group (the caller may only be told of a job in its producer scope).
SELECT id, task_name, group_key
  FROM distlock.task_queue
 WHERE queue OPERATOR(pg_catalog.=) $1
   AND unique_key OPERATOR(pg_catalog.=) $2
   AND status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed', 'processing'])
