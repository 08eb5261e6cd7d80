-- params: integer
-- The token of the claim running task $1 (a session claim's, or a
-- lease-mode claim's while its lease lasts), whether it is a session claim,
-- and the backend that holds a session claim's lock.
SELECT t.current_token,
       t.lease_expires_at IS NULL,
       r.holder_pid
  FROM distlock.scheduled_tasks t
  LEFT JOIN distlock.task_execution_log r
    ON r.task_id OPERATOR(pg_catalog.=) t.id
   AND r.status OPERATOR(pg_catalog.=) 'running'
   AND r.fencing_token OPERATOR(pg_catalog.=) t.current_token
 WHERE t.id OPERATOR(pg_catalog.=) $1
   AND (t.lease_expires_at IS NULL OR t.lease_expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
