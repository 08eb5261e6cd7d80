-- params: bigint, timestamptz, text
-- queue_reap_expired.sql for SQL older than 0.4.0, which has no distlock.job_attempts:
-- it records no attempt.
-- Jobs whose consumer's lease ran out go back to pending (their next claim
-- counts another attempt), or to dead when no attempt is left; up to $1 of
-- them, of queue $3 (NULL: any). Rows another consumer is touching
-- (settling, extending) are skipped. $2 is the time (a parameter, so that
-- it is an index condition). The sweep runs it for every queue, and a claim
-- of a queue with a concurrency limit for that queue, whose room the
-- expired jobs still take.
-- A processing job with no lease (a row set by hand) counts as expired.
WITH expired AS (
    SELECT id
      FROM distlock.task_queue
     WHERE status OPERATOR(pg_catalog.=) 'processing'
       AND (lease_expires_at OPERATOR(pg_catalog.<=) $2 OR lease_expires_at IS NULL)
       AND ($3::pg_catalog.text IS NULL OR queue OPERATOR(pg_catalog.=) $3)
     ORDER BY lease_expires_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
)
UPDATE distlock.task_queue q
   SET status = CASE WHEN q.attempts OPERATOR(pg_catalog.>=) q.max_attempts THEN 'dead' ELSE 'pending' END,
       completed_at = CASE WHEN q.attempts OPERATOR(pg_catalog.>=) q.max_attempts THEN $2 END,
       lease_expires_at = NULL,
       -- Not the claim's takeover message ('lease expired (worker ...'),
       -- which marks a job with no place in the runnable index: a job put
       -- back here keeps its place (claim.rs).
       last_error = CASE WHEN q.attempts OPERATOR(pg_catalog.>=) q.max_attempts
                         THEN 'lease expired, no attempt left (worker '
                         ELSE 'lease expired, put back (worker ' END
                    OPERATOR(pg_catalog.||) COALESCE(q.worker_id, '?') OPERATOR(pg_catalog.||) ')'
  FROM expired
 WHERE q.id OPERATOR(pg_catalog.=) expired.id
RETURNING q.status OPERATOR(pg_catalog.=) 'pending', q.queue
