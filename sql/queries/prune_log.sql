DELETE FROM distlock.task_execution_log
 WHERE status <> 'running'
   AND completed_at < pg_catalog.now() - $1
