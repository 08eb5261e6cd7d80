-- params: interval
-- 0.2.0's tables (no completed_jobs): the job is completed in place.
-- Completed and dead jobs that finished more than $1 ago. Pending, failed
-- (waiting for a retry) and processing jobs are never deleted.
DELETE FROM distlock.task_queue
 WHERE (status OPERATOR(pg_catalog.=) 'completed' OR status OPERATOR(pg_catalog.=) 'dead')
   AND completed_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) $1)
