-- params: bigint, timestamptz, text[], integer, timestamptz, bigint
-- Of the $1 runnable jobs (run_after <= $2) a claim from the head of every
-- queue saw and passed over, how many it passed over for good: those of a
-- paused or limited queue (claimed through queue_consume_queue.sql if at
-- all) and, for a caller of scope $3, those outside it. The others were
-- locked (claim_start.rs). Run after the claim, in its transaction, in a
-- snapshot taken right before it (plans/in_snapshot.rs) with the command
-- id advanced: the jobs it claimed are no longer runnable, so the first $1
-- runnable jobs in the claim's order are the ones it passed over, read no
-- further than the place $4, $5, $6 where it stopped (the tail of the
-- index when that is not known). Both bounds: the two snapshots are not
-- the same one (SPI does not hand out the claim's), and the place alone is
-- not known when the claim returned only jobs taken over from expired
-- leases (they carry the takeover's mark). Two ranges, as the
-- claim reads them: a higher priority than $4, then $4 up to ($5, $6).
SELECT pg_catalog.count(*)
  FROM (SELECT queue, task_name
          FROM ((SELECT queue, task_name
                   FROM distlock.task_queue
                  WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
                    AND run_after OPERATOR(pg_catalog.<=) $2
                    AND priority OPERATOR(pg_catalog.>) $4
                  ORDER BY priority DESC, run_after, id
                  LIMIT $1)
                UNION ALL
                (SELECT queue, task_name
                   FROM distlock.task_queue
                  WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
                    AND run_after OPERATOR(pg_catalog.<=) $2
                    AND priority OPERATOR(pg_catalog.=) $4
                    AND (run_after, id) OPERATOR(pg_catalog.<=) ($5, $6)
                  ORDER BY priority DESC, run_after, id
                  LIMIT $1)) AS ranges
         LIMIT $1) AS passed
 WHERE queue OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT s.queue FROM distlock.queue_settings s
                                              WHERE s.paused OR s.max_processing IS NOT NULL))
    OR NOT ($3 IS NULL OR (task_name OPERATOR(pg_catalog.^@) ANY ($3)
                      AND queue OPERATOR(pg_catalog.^@) ANY ($3)))
