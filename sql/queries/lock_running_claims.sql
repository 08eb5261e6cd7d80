-- params: none
-- Row-locks every running claim that no other sweep or release is touching.
-- A row that changed state after our snapshot is re-checked on its latest
-- version and dropped here, so it is never processed twice.
SELECT id
  FROM distlock.task_execution_log
 WHERE status OPERATOR(pg_catalog.=) 'running'
 ORDER BY id
   FOR UPDATE SKIP LOCKED
