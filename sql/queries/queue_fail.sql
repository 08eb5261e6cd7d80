-- A failed attempt: retried after 10 s * 2^(attempts - 1), capped at 1 hour,
-- jittered to 50-100 %; dead once max_attempts attempts have been made.
UPDATE distlock.task_queue
   SET status = CASE WHEN attempts >= max_attempts THEN 'dead' ELSE 'failed' END,
       completed_at = CASE WHEN attempts >= max_attempts THEN pg_catalog.clock_timestamp() END,
       run_after = CASE WHEN attempts >= max_attempts THEN run_after
                        ELSE pg_catalog.clock_timestamp()
                             + LEAST(interval '10 seconds' * pg_catalog.power(2, LEAST(attempts - 1, 20)),
                                     interval '1 hour')
                             * (0.5 + pg_catalog.random() / 2)
                   END,
       lease_expires_at = NULL,
       last_error = $3
 WHERE id = $1 AND status = 'processing' AND worker_id = $2
   AND ($4::int IS NULL OR attempts = $4)
RETURNING id
