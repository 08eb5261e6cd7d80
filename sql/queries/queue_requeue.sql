-- params: text, bigint[]
-- Processing jobs of queue $1 (any when NULL) among $2 (any when NULL) go
-- back to pending, runnable now: an admin takes them back from consumers
-- that will not settle them (dead, hung, or holding a long lease). The
-- attempt the consumer used stays counted; one more is allowed when none is
-- left, and it is recorded in distlock.job_attempts (requeued), once. The
-- consumer's later settle finds the job no longer processing for it and is
-- refused (false). Rows a consumer is settling right now are skipped.
WITH taken AS (
    SELECT q.id, q.worker_id
      FROM distlock.task_queue q
     WHERE q.status OPERATOR(pg_catalog.=) 'processing'
       AND ($1::pg_catalog.text IS NULL OR q.queue OPERATOR(pg_catalog.=) $1)
       AND ($2::pg_catalog.int8[] IS NULL OR q.id OPERATOR(pg_catalog.=) ANY ($2))
       FOR UPDATE SKIP LOCKED
), requeued AS (
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
    -- taken's worker_id: the row's before this update cleared it.
    RETURNING q.id, q.queue, q.attempts, taken.worker_id, q.started_at, q.run_after, q.last_error
), recorded AS (
    INSERT INTO distlock.job_attempts (job_id, attempt, worker_id, started_at, ended_at, outcome, error)
    SELECT r.id, r.attempts, r.worker_id, r.started_at, r.run_after, 'requeued', r.last_error
      FROM requeued r
        ON CONFLICT (job_id, attempt) DO NOTHING
)
SELECT r.id, r.queue FROM requeued r
