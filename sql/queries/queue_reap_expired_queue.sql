-- params: text, timestamptz
-- queue_reap_expired.sql for the jobs of queue $1 only: taken back from
-- consumers whose lease ran out at or before $2 by a claim of the queue,
-- which has a concurrency limit that their rows still count against. Rows
-- another consumer is touching (settling, extending) are skipped, and keep
-- counting.
WITH expired AS (
    SELECT id
      FROM distlock.task_queue
     WHERE status OPERATOR(pg_catalog.=) 'processing'
       AND lease_expires_at OPERATOR(pg_catalog.<=) $2
       AND queue OPERATOR(pg_catalog.=) $1
       FOR UPDATE SKIP LOCKED
)
UPDATE distlock.task_queue q
   SET status = CASE WHEN q.attempts OPERATOR(pg_catalog.>=) q.max_attempts THEN 'dead' ELSE 'pending' END,
       completed_at = CASE WHEN q.attempts OPERATOR(pg_catalog.>=) q.max_attempts THEN $2 END,
       lease_expires_at = NULL,
       last_error = 'lease expired (worker ' OPERATOR(pg_catalog.||) COALESCE(q.worker_id, '?')
                    OPERATOR(pg_catalog.||) ')'
  FROM expired
 WHERE q.id OPERATOR(pg_catalog.=) expired.id
RETURNING q.status OPERATOR(pg_catalog.=) 'pending'
