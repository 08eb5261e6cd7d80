-- params: integer
-- The token of the claim running task $1 (a session claim's, or a
-- lease-mode claim's while its lease lasts), whether it is a session claim,
-- the backend that holds a session claim's lock, whether that backend is
-- still the one that made the claim (its start time: a pid can be reused),
-- and the key the claim logged (its own lock's from 0.4.0 on).
SELECT t.current_token,
       t.lease_expires_at IS NULL,
       r.holder_pid,
       CASE WHEN r.holder_pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() THEN true
            -- pg_stat_activity reads a backend table kept for the whole
            -- transaction: a pid it lacks belongs to a backend that started
            -- after that (no reuse can be told then; the lock check decides).
            ELSE COALESCE((SELECT a.backend_start OPERATOR(pg_catalog.=) r.holder_backend_start
                             FROM pg_catalog.pg_stat_activity a
                            WHERE a.pid OPERATOR(pg_catalog.=) r.holder_pid), true) END,
       r.lock_id
  FROM distlock.scheduled_tasks t
  LEFT JOIN distlock.task_execution_log r
    ON r.task_id OPERATOR(pg_catalog.=) t.id
   AND r.status OPERATOR(pg_catalog.=) 'running'
   AND r.fencing_token OPERATOR(pg_catalog.=) t.current_token
 WHERE t.id OPERATOR(pg_catalog.=) $1
   AND (t.lease_expires_at IS NULL OR t.lease_expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
