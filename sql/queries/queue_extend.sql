-- params: bigint, text, interval, integer
UPDATE distlock.task_queue
   SET lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $3
 WHERE id OPERATOR(pg_catalog.=) $1 AND status OPERATOR(pg_catalog.=) 'processing'
   AND worker_id OPERATOR(pg_catalog.=) $2
   AND ($4::int IS NULL OR attempts OPERATOR(pg_catalog.=) $4)
RETURNING id, holder_role
