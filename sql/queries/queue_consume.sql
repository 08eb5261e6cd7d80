-- Claims up to $1 runnable jobs for worker $2 with a lease of $3.
WITH next AS (
    SELECT id
      FROM distlock.task_queue
     WHERE status IN ('pending', 'failed')
       AND run_after <= pg_catalog.clock_timestamp()
     ORDER BY priority DESC, run_after, id
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE distlock.task_queue q
   SET status = 'processing',
       worker_id = $2,
       started_at = pg_catalog.clock_timestamp(),
       lease_expires_at = pg_catalog.clock_timestamp() + $3,
       attempts = q.attempts + 1
  FROM next
 WHERE q.id = next.id
RETURNING q.id, q.task_name, q.payload, q.attempts, q.max_attempts, q.lease_expires_at, q.priority
