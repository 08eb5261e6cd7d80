-- params: text, bigint[]
-- Dead jobs of queue $1 (any when NULL) among $2 (any when NULL) go back to
-- pending, runnable now, with one attempt more than they have used (River's
-- JobRetry); their last error stays. A job whose unique key another job
-- already holds again is left dead, as is all but the newest dead job of one
-- key (one unfinished job per key and queue).
WITH dead AS (
    SELECT q.id, q.queue, q.unique_key
      FROM distlock.task_queue q
     WHERE q.status OPERATOR(pg_catalog.=) 'dead'
       AND ($1::pg_catalog.text IS NULL OR q.queue OPERATOR(pg_catalog.=) $1)
       AND ($2::pg_catalog.int8[] IS NULL OR q.id OPERATOR(pg_catalog.=) ANY ($2))
       FOR UPDATE SKIP LOCKED
), ranked AS (
    SELECT d.id, d.queue, d.unique_key,
           pg_catalog.row_number() OVER (PARTITION BY d.queue, d.unique_key ORDER BY d.id DESC) AS newest
      FROM dead d
), retried AS (
    SELECT d.id
      FROM ranked d
     WHERE d.unique_key IS NULL
        OR (d.newest OPERATOR(pg_catalog.=) 1
            AND NOT EXISTS (SELECT FROM distlock.task_queue o
                             WHERE o.queue OPERATOR(pg_catalog.=) d.queue
                               AND o.unique_key OPERATOR(pg_catalog.=) d.unique_key
                               AND o.status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed', 'processing'])))
)
UPDATE distlock.task_queue q
   SET status = 'pending',
       run_after = pg_catalog.clock_timestamp(),
       max_attempts = GREATEST(q.max_attempts, q.attempts OPERATOR(pg_catalog.+) 1),
       completed_at = NULL,
       lease_expires_at = NULL,
       worker_id = NULL,
       holder_role = NULL
  FROM retried
 WHERE q.id OPERATOR(pg_catalog.=) retried.id
RETURNING q.id, q.queue
