-- params: bigint[], text, integer[]
-- 0.2.0's tables (no completed_jobs): the job is completed in place.
-- Completes the jobs $1 that worker $2 holds; with $3, job $1[i] only in
-- attempt $3[i] (ROWS FROM pads a missing $3 with NULLs).
UPDATE distlock.task_queue q
   SET status = 'completed',
       completed_at = pg_catalog.clock_timestamp(),
       lease_expires_at = NULL
  FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.int8[]), pg_catalog.unnest($3::pg_catalog.int4[])) AS j (id, attempt)
 WHERE q.id OPERATOR(pg_catalog.=) j.id
   AND q.status OPERATOR(pg_catalog.=) 'processing'
   AND q.worker_id OPERATOR(pg_catalog.=) $2
   AND (j.attempt IS NULL OR q.attempts OPERATOR(pg_catalog.=) j.attempt)
RETURNING q.id, q.holder_role
