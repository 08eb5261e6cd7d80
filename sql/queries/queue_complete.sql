-- $3 is unused: all settle statements take (job, worker, value, attempt);
-- a NULL attempt settles whichever attempt the worker holds.
UPDATE distlock.task_queue
   SET status = 'completed',
       completed_at = pg_catalog.clock_timestamp(),
       lease_expires_at = NULL
 WHERE id = $1 AND status = 'processing' AND worker_id = $2
   AND ($4::int IS NULL OR attempts = $4)
   AND $3::boolean IS NULL
RETURNING id
