-- params: bigint, text, interval, integer
-- The status is tested with texteq rather than =: a condition the lease
-- index's predicate (status = 'processing') matches would let the planner
-- read the job by scanning that index, every processing job and every dead
-- entry of one, when statistics from a quiet moment call it empty. The
-- primary key finds the job in one step whatever the statistics say.
UPDATE distlock.task_queue
   SET lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $3
 WHERE id OPERATOR(pg_catalog.=) $1 AND pg_catalog.texteq(status, 'processing')
   AND worker_id OPERATOR(pg_catalog.=) $2
   AND ($4::int IS NULL OR attempts OPERATOR(pg_catalog.=) $4)
RETURNING id, holder_role
