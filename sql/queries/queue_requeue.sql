-- params: text, bigint[]
-- Processing jobs of queue $1 (any when NULL) among $2 (any when NULL) go
-- back to pending, runnable now: an admin takes them back from consumers
-- that will not settle them (dead, hung, or holding a long lease). The
-- attempt the consumer used stays counted; one more is allowed when none is
-- left. The consumer's later settle finds the job no longer processing for
-- it and is refused (false). Rows a consumer is settling right now are
-- skipped.
WITH taken AS (
    SELECT q.id
      FROM distlock.task_queue q
     WHERE q.status OPERATOR(pg_catalog.=) 'processing'
       AND ($1::pg_catalog.text IS NULL OR q.queue OPERATOR(pg_catalog.=) $1)
       AND ($2::pg_catalog.int8[] IS NULL OR q.id OPERATOR(pg_catalog.=) ANY ($2))
       FOR UPDATE SKIP LOCKED
)
UPDATE distlock.task_queue q
   SET status = 'pending',
       run_after = pg_catalog.clock_timestamp(),
       max_attempts = GREATEST(q.max_attempts, q.attempts OPERATOR(pg_catalog.+) 1),
       lease_expires_at = NULL,
       last_error = 'returned to the queue by an admin (worker ' OPERATOR(pg_catalog.||) COALESCE(q.worker_id, '?')
                    OPERATOR(pg_catalog.||) ')',
       worker_id = NULL,
       holder_role = NULL
  FROM taken
 WHERE q.id OPERATOR(pg_catalog.=) taken.id
RETURNING q.id, q.queue
