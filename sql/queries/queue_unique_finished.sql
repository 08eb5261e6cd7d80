-- params: text, text, interval
-- The newest job of queue $1 with unique key $2 completed within $3 of now,
-- if any, its name and its group (the caller may only be told of a job in
-- its producer scope): enqueue_task's p_unique_for. Read in a statement of its
-- own after the insert, so that a holder whose completion committed while
-- the insert waited for it is seen here (completed_jobs_unique_key_idx).
SELECT id, task_name, group_key
  FROM distlock.completed_jobs
 WHERE queue OPERATOR(pg_catalog.=) $1
   AND unique_key OPERATOR(pg_catalog.=) $2
   AND completed_at OPERATOR(pg_catalog.>) (pg_catalog.now() OPERATOR(pg_catalog.-) $3)
 ORDER BY completed_at DESC
 LIMIT 1
