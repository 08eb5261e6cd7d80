-- params: bigint, timestamptz, text[], integer, timestamptz, bigint
-- Of the runnable jobs (run_after <= $2) that a claim from the head of every
-- queue read up to the place $4, $5, $6 (the last job it returned; the tail
-- of the index when it found fewer than it wanted), how many, at most $1, it
-- passed over for good: those of a paused or limited queue (claimed through
-- queue_consume_queue.sql if at all) and, for a caller of scope $3, those
-- outside it. The others it passed over were locked (claim_start.rs). It
-- reads the claim's index over the range the claim read, in two ranges as
-- the claim does: a higher priority than $4, then $4 up to ($5, $6).
SELECT pg_catalog.count(*)
  FROM (SELECT
          FROM ((SELECT
                   FROM distlock.task_queue
                  WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
                    AND run_after OPERATOR(pg_catalog.<=) $2
                    AND priority OPERATOR(pg_catalog.>) $4
                    AND (queue OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT s.queue FROM distlock.queue_settings s
                                                                  WHERE s.paused OR s.max_processing IS NOT NULL))
                         OR NOT ($3 IS NULL OR (EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                                         WHERE pg_catalog.starts_with(task_name, s.prefix))
                                           AND EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                                         WHERE pg_catalog.starts_with(queue, s.prefix)))))
                  ORDER BY priority DESC, run_after, id
                  LIMIT $1)
                UNION ALL
                (SELECT
                   FROM distlock.task_queue
                  WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
                    AND run_after OPERATOR(pg_catalog.<=) $2
                    AND priority OPERATOR(pg_catalog.=) $4
                    AND (run_after, id) OPERATOR(pg_catalog.<=) ($5, $6)
                    AND (queue OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT s.queue FROM distlock.queue_settings s
                                                                  WHERE s.paused OR s.max_processing IS NOT NULL))
                         OR NOT ($3 IS NULL OR (EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                                         WHERE pg_catalog.starts_with(task_name, s.prefix))
                                           AND EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                                         WHERE pg_catalog.starts_with(queue, s.prefix)))))
                  ORDER BY priority DESC, run_after, id
                  LIMIT $1)) AS passed
         LIMIT $1) AS for_good
