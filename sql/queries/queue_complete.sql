-- params: bigint, text, boolean, integer
-- $3 is unused: all settle statements take (job, worker, value, attempt);
-- a NULL attempt settles whichever attempt the worker holds. The job moves
-- from task_queue to completed_jobs.
WITH done AS (
    DELETE FROM distlock.task_queue
     WHERE id OPERATOR(pg_catalog.=) $1 AND status OPERATOR(pg_catalog.=) 'processing'
       AND worker_id OPERATOR(pg_catalog.=) $2
       AND ($4::int IS NULL OR attempts OPERATOR(pg_catalog.=) $4)
       AND $3::boolean IS NULL
    RETURNING id, queue, task_name, payload, worker_id, created_at, started_at, attempts, max_attempts,
              run_after, priority, last_error, holder_role, producer_role, unique_key
)
INSERT INTO distlock.completed_jobs (id, queue, task_name, payload, worker_id, created_at, started_at, completed_at,
                                     attempts, max_attempts, run_after, priority, last_error, holder_role,
                                     producer_role, unique_key)
SELECT id, queue, task_name, payload, worker_id, created_at, started_at, pg_catalog.clock_timestamp(),
       attempts, max_attempts, run_after, priority, last_error, holder_role, producer_role, unique_key
  FROM done
RETURNING id, holder_role
