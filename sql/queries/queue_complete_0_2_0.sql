-- params: bigint, text, boolean, integer
-- 0.2.0's tables (no completed_jobs): the job is completed in place.
-- $3 is unused: all settle statements take (job, worker, value, attempt);
-- a NULL attempt settles whichever attempt the worker holds.
UPDATE distlock.task_queue
   SET status = 'completed',
       completed_at = pg_catalog.clock_timestamp(),
       lease_expires_at = NULL
 WHERE id OPERATOR(pg_catalog.=) $1 AND status OPERATOR(pg_catalog.=) 'processing'
   AND worker_id OPERATOR(pg_catalog.=) $2
   AND ($4::int IS NULL OR attempts OPERATOR(pg_catalog.=) $4)
   AND $3::boolean IS NULL
RETURNING id, holder_role
