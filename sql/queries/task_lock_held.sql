-- params: integer
-- Whether task $1's current session-mode claim is alive: its running log
-- row (the task's current token) names a backend that holds the task's lock
-- (either tag), as running_tasks.holder_alive judges. From pg_locks, which
-- is no snapshot; the log row is seen because run_now.rs reads it after
-- locking the task's row, which the claim had committed. Not any holder of
-- the lock: the old tag (field4 2) is one pg_advisory_lock(int, int) can
-- take, so a session squatting on it must not count as a claim.
SELECT EXISTS (
    SELECT 1
      FROM distlock.scheduled_tasks t
      JOIN distlock.task_execution_log r
        ON r.task_id OPERATOR(pg_catalog.=) t.id
       AND r.fencing_token OPERATOR(pg_catalog.=) t.current_token
       AND r.status OPERATOR(pg_catalog.=) 'running'
      JOIN distlock.task_lock_holders h
        ON h.task_id OPERATOR(pg_catalog.=) r.task_id AND h.pid OPERATOR(pg_catalog.=) r.holder_pid
     WHERE t.id OPERATOR(pg_catalog.=) $1)
