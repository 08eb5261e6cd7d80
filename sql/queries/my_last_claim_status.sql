-- params: integer, timestamptz
SELECT status
  FROM distlock.task_execution_log
 WHERE task_id OPERATOR(pg_catalog.=) $1
   AND holder_pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
   AND holder_backend_start OPERATOR(pg_catalog.=) $2
 ORDER BY id DESC
 LIMIT 1
