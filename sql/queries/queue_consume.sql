-- Claims up to $1 runnable jobs for worker $2 of role $4 with a lease of $3.
WITH next AS (
    SELECT id
      FROM distlock.task_queue
     WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
       AND run_after OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
     ORDER BY priority DESC, run_after, id
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE distlock.task_queue q
   SET status = 'processing',
       worker_id = $2,
       holder_role = $4,
       started_at = pg_catalog.clock_timestamp(),
       lease_expires_at = pg_catalog.clock_timestamp() OPERATOR(pg_catalog.+) $3,
       attempts = q.attempts OPERATOR(pg_catalog.+) 1
  FROM next
 WHERE q.id OPERATOR(pg_catalog.=) next.id
RETURNING q.id, q.task_name, q.payload, q.attempts, q.max_attempts, q.lease_expires_at, q.priority
