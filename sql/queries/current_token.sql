-- params: integer
-- The token of the claim running task $1 (a session claim's, or a
-- lease-mode claim's while its lease lasts), whether it is a session claim,
-- the backend that holds a session claim's lock, and whether that backend is
-- still the one that made the claim (its start time: a pid can be reused).
SELECT t.current_token,
       t.lease_expires_at IS NULL,
       r.holder_pid,
       CASE WHEN r.holder_pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() THEN true
            ELSE (SELECT a.backend_start OPERATOR(pg_catalog.=) r.holder_backend_start
                    FROM pg_catalog.pg_stat_get_activity(r.holder_pid) a
                   -- NULL asks for every backend
                   WHERE a.pid OPERATOR(pg_catalog.=) r.holder_pid) END
  FROM distlock.scheduled_tasks t
  LEFT JOIN distlock.task_execution_log r
    ON r.task_id OPERATOR(pg_catalog.=) t.id
   AND r.status OPERATOR(pg_catalog.=) 'running'
   AND r.fencing_token OPERATOR(pg_catalog.=) t.current_token
 WHERE t.id OPERATOR(pg_catalog.=) $1
   AND (t.lease_expires_at IS NULL OR t.lease_expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
