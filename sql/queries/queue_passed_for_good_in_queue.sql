-- params: bigint, timestamptz, text[], integer, timestamptz, bigint, text
-- queue_passed_for_good.sql for a claim of queue $7 by a caller of scope $3
-- (not NULL): its runnable jobs outside the scope, read along the queue's
-- index. (The claim reads nothing of a paused queue, nor of a limited one
-- unless it may claim there.)
SELECT pg_catalog.count(*)
  FROM (SELECT
          FROM ((SELECT
                   FROM distlock.task_queue
                  WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
                    AND queue OPERATOR(pg_catalog.=) $7
                    AND run_after OPERATOR(pg_catalog.<=) $2
                    AND priority OPERATOR(pg_catalog.>) $4
                    AND NOT (EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                      WHERE pg_catalog.starts_with(task_name, s.prefix))
                             AND EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                          WHERE pg_catalog.starts_with(queue, s.prefix)))
                  ORDER BY queue, priority DESC, run_after, id
                  LIMIT $1)
                UNION ALL
                (SELECT
                   FROM distlock.task_queue
                  WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
                    AND queue OPERATOR(pg_catalog.=) $7
                    AND run_after OPERATOR(pg_catalog.<=) $2
                    AND priority OPERATOR(pg_catalog.=) $4
                    AND (run_after, id) OPERATOR(pg_catalog.<=) ($5, $6)
                    AND NOT (EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                      WHERE pg_catalog.starts_with(task_name, s.prefix))
                             AND EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                          WHERE pg_catalog.starts_with(queue, s.prefix)))
                  ORDER BY queue, priority DESC, run_after, id
                  LIMIT $1)) AS passed
         LIMIT $1) AS for_good
