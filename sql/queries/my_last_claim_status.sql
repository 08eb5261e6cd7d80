SELECT status
  FROM distlock.task_execution_log
 WHERE task_id = $1
   AND holder_pid = pg_catalog.pg_backend_pid()
   AND holder_backend_start = $2
 ORDER BY id DESC
 LIMIT 1
