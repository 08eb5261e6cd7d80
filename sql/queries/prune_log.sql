-- params: interval
DELETE FROM distlock.task_execution_log
 WHERE status OPERATOR(pg_catalog.<>) 'running'
   AND completed_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) $1)
