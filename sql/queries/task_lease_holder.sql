-- params: integer, bigint
-- The running log row and claiming role of task $1's current lease-mode
-- claim, token $2, while its lease lasts; the task row stays locked until
-- the release commits, so no claim can take over in between.
SELECT l.id, l.holder_role
  FROM distlock.scheduled_tasks t
  JOIN distlock.task_execution_log l
    ON l.task_id OPERATOR(pg_catalog.=) t.id
   AND l.status OPERATOR(pg_catalog.=) 'running'
   AND l.fencing_token OPERATOR(pg_catalog.=) t.current_token
 WHERE t.id OPERATOR(pg_catalog.=) $1
   AND t.current_token OPERATOR(pg_catalog.=) $2
   AND t.lease_expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp()
   FOR UPDATE OF t
