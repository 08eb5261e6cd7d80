-- params: bigint, timestamptz, text[]
-- Of the $1 runnable jobs (run_after <= $2) a claim from the head of every
-- queue saw and passed over, how many it passed over for good: those of a
-- paused or limited queue (claimed through queue_consume_queue.sql if at
-- all) and, for a caller of scope $3, those outside it. The others were
-- locked (claim_start.rs). Run after the claim, in its transaction: the
-- jobs it claimed are no longer runnable, so the first $1 runnable jobs in
-- the claim's order are the ones it passed over, and the count reads no
-- further along the claim's index than the claim did. (Not "up to the last
-- job it returned": a job the sweep put back carries the takeover's mark
-- and says nothing of where the claim read to.)
SELECT pg_catalog.count(*)
  FROM (SELECT queue, task_name
          FROM distlock.task_queue
         WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
           AND run_after OPERATOR(pg_catalog.<=) $2
         ORDER BY priority DESC, run_after, id
         LIMIT $1) AS passed
 WHERE queue OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT s.queue FROM distlock.queue_settings s
                                              WHERE s.paused OR s.max_processing IS NOT NULL))
    OR NOT ($3 IS NULL OR (EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                    WHERE pg_catalog.starts_with(task_name, s.prefix))
                      AND EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                    WHERE pg_catalog.starts_with(queue, s.prefix))))
