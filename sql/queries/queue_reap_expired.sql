-- Jobs whose consumer's lease ran out go back to pending (their next claim
-- counts another attempt), or to dead when no attempt is left. Rows another
-- consumer is touching are skipped.
WITH expired AS (
    SELECT id
      FROM distlock.task_queue
     WHERE status = 'processing'
       AND lease_expires_at <= pg_catalog.clock_timestamp()
     ORDER BY lease_expires_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE distlock.task_queue q
   SET status = CASE WHEN q.attempts >= q.max_attempts THEN 'dead' ELSE 'pending' END,
       completed_at = CASE WHEN q.attempts >= q.max_attempts THEN pg_catalog.clock_timestamp() END,
       lease_expires_at = NULL,
       last_error = 'lease expired (worker ' || COALESCE(q.worker_id, '?') || ')'
  FROM expired
 WHERE q.id = expired.id
