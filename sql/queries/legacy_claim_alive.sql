-- params: integer
-- Whether task $1 has a running claim whose holder backend holds one of
-- the task's locks: with the legacy tag busy, a claim of an older library.
SELECT EXISTS (
    SELECT 1
      FROM distlock.task_execution_log r
      JOIN distlock.task_lock_holders h
        ON h.task_id OPERATOR(pg_catalog.=) r.task_id AND h.pid OPERATOR(pg_catalog.=) r.holder_pid
     WHERE r.task_id OPERATOR(pg_catalog.=) $1
       AND r.status OPERATOR(pg_catalog.=) 'running')
