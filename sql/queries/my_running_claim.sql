-- The running claim of task $1 held by this backend ($2: its start time),
-- row-locked so a concurrent sweep cannot change it under us.
SELECT id, worker_id
  FROM distlock.task_execution_log
 WHERE task_id = $1
   AND status = 'running'
   AND holder_pid = pg_catalog.pg_backend_pid()
   AND holder_backend_start = $2
 ORDER BY id DESC
 LIMIT 1
   FOR UPDATE
