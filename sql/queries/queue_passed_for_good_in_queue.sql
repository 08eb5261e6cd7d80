-- params: bigint, timestamptz, text[], integer, timestamptz, bigint, text
-- queue_passed_for_good.sql for a claim of queue $7 by a caller of scope $3
-- (not NULL): of the first $1 runnable jobs of the queue up to the place
-- $4, $5, $6, along the queue's index, those outside the scope. (The claim
-- reads nothing of a paused queue, nor of a limited one unless it may claim
-- there.) The queue is compared for equality, so that the later columns'
-- conditions end the scan of its index, and also bounded from both sides
-- and leading the order: with the equality alone the index of every queue
-- gives the same order, and the planner chose it where the queue's own
-- jobs lie scattered in the table, reading every queue's jobs (the bounds
-- make its estimate of the queue's index small; plans::ordered_scans rules
-- out a sort).
SELECT pg_catalog.count(*)
  FROM (SELECT queue, task_name
          FROM ((SELECT queue, task_name
                   FROM distlock.task_queue
                  WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
                    AND queue OPERATOR(pg_catalog.=) $7
                    AND queue OPERATOR(pg_catalog.>=) $7
                    AND queue OPERATOR(pg_catalog.<=) $7
                    AND run_after OPERATOR(pg_catalog.<=) $2
                    AND priority OPERATOR(pg_catalog.>) $4
                  ORDER BY queue, priority DESC, run_after, id
                  LIMIT $1)
                UNION ALL
                (SELECT queue, task_name
                   FROM distlock.task_queue
                  WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
                    AND queue OPERATOR(pg_catalog.=) $7
                    AND queue OPERATOR(pg_catalog.>=) $7
                    AND queue OPERATOR(pg_catalog.<=) $7
                    AND run_after OPERATOR(pg_catalog.<=) $2
                    AND priority OPERATOR(pg_catalog.=) $4
                    AND (run_after, id) OPERATOR(pg_catalog.<=) ($5, $6)
                  ORDER BY queue, priority DESC, run_after, id
                  LIMIT $1)) AS ranges
         LIMIT $1) AS passed
 WHERE NOT (task_name OPERATOR(pg_catalog.^@) ANY ($3)
            AND queue OPERATOR(pg_catalog.^@) ANY ($3))
