-- params: bigint, text, boolean, integer
-- $3 is unused: all settle statements take (job, worker, value, attempt);
-- a NULL attempt settles whichever attempt the worker holds. The job moves
-- from task_queue to completed_jobs.
-- The status is tested with texteq rather than =: a condition the lease
-- index's predicate (status = 'processing') matches would let the planner
-- read the job by scanning that index, every processing job and every dead
-- entry of one, when statistics from a quiet moment call it empty. The
-- primary key finds the job in one step whatever the statistics say.
WITH done AS (
    DELETE FROM distlock.task_queue
     WHERE id OPERATOR(pg_catalog.=) $1 AND pg_catalog.texteq(status, 'processing')
       AND worker_id OPERATOR(pg_catalog.=) $2
       AND ($4::int IS NULL OR attempts OPERATOR(pg_catalog.=) $4)
       AND $3::boolean IS NULL
    RETURNING id, queue, task_name, payload, worker_id, created_at, started_at, attempts, max_attempts,
              run_after, priority, last_error, holder_role, producer_role, unique_key, group_key
)
INSERT INTO distlock.completed_jobs (id, queue, task_name, payload, worker_id, created_at, started_at, completed_at,
                                     attempts, max_attempts, run_after, priority, last_error, holder_role,
                                     producer_role, unique_key, group_key)
SELECT id, queue, task_name, payload, worker_id, created_at, started_at, pg_catalog.clock_timestamp(),
       attempts, max_attempts, run_after, priority, last_error, holder_role, producer_role, unique_key, group_key
  FROM done
RETURNING id, holder_role, queue
