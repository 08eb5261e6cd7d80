-- params: bigint[], text, integer[]
-- queue_complete_many.sql for SQL older than 0.4.0, whose jobs have no group_key.
-- Completes the jobs $1 that worker $2 holds; with $3, job $1[i] only in
-- attempt $3[i] (ROWS FROM pads a missing $3 with NULLs). The jobs move
-- from task_queue to completed_jobs.
-- The status is tested with texteq rather than =, and the ids also with
-- = ANY: the planner then finds each job through the primary key, never by
-- scanning the lease index (every processing job and every dead entry of
-- one), which statistics from a quiet moment call empty.
WITH done AS (
    DELETE FROM distlock.task_queue q
     USING ROWS FROM (pg_catalog.unnest($1::pg_catalog.int8[]), pg_catalog.unnest($3::pg_catalog.int4[])) AS j (id, attempt)
     WHERE q.id OPERATOR(pg_catalog.=) j.id
       AND q.id OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.int8[])
       AND pg_catalog.texteq(q.status, 'processing')
       AND q.worker_id OPERATOR(pg_catalog.=) $2
       AND (j.attempt IS NULL OR q.attempts OPERATOR(pg_catalog.=) j.attempt)
    RETURNING q.id, q.queue, q.task_name, q.payload, q.worker_id, q.created_at, q.started_at, q.attempts,
              q.max_attempts, q.run_after, q.priority, q.last_error, q.holder_role, q.producer_role, q.unique_key
)
INSERT INTO distlock.completed_jobs (id, queue, task_name, payload, worker_id, created_at, started_at, completed_at,
                                     attempts, max_attempts, run_after, priority, last_error, holder_role,
                                     producer_role, unique_key)
SELECT id, queue, task_name, payload, worker_id, created_at, started_at, pg_catalog.clock_timestamp(),
       attempts, max_attempts, run_after, priority, last_error, holder_role, producer_role, unique_key
  FROM done
RETURNING id, holder_role, queue
