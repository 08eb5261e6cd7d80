-- params: integer
-- current_token.sql for a database whose SQL objects are still 0.1.0's
-- (no lease-mode claims yet: every claim is a session claim), so that
-- fencing keeps answering until ALTER EXTENSION pg_distlock UPDATE runs.
SELECT t.current_token,
       true,
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
