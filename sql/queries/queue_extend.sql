UPDATE distlock.task_queue
   SET lease_expires_at = pg_catalog.clock_timestamp() + $3
 WHERE id = $1 AND status = 'processing' AND worker_id = $2
   AND ($4::int IS NULL OR attempts = $4)
RETURNING id
