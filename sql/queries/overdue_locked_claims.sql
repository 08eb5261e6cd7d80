-- params: bigint[], integer
-- Running session claims past their task's timeout ($2 minutes when it has
-- none) that the sweep could not row-lock ($1 are those it did lock), whose
-- holder's transaction has been open longer than that timeout: a holder that
-- ran release_task_lock (which locks the log row) in a transaction it left
-- open. SKIP LOCKED would pass such a claim over for as long as the holder
-- keeps its transaction open.
SELECT r.log_id,
       r.task_id,
       r.holder_pid,
       COALESCE(r.timeout, pg_catalog.make_interval(mins => $2))::pg_catalog.text
  FROM distlock.running_tasks r
 WHERE r.log_id OPERATOR(pg_catalog.<>) ALL ($1)
   AND r.holder_pid IS NOT NULL
   AND r.running_for OPERATOR(pg_catalog.>) COALESCE(r.timeout, pg_catalog.make_interval(mins => $2))
   -- The holder still holds the task: a backend that lost the claim long ago
   -- and now runs something else is left alone.
   AND EXISTS (SELECT 1 FROM distlock.task_lock_holders h
                WHERE h.task_id OPERATOR(pg_catalog.=) r.task_id
                  AND h.pid OPERATOR(pg_catalog.=) r.holder_pid
                  AND NOT h.legacy)
   AND EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a
                WHERE a.pid OPERATOR(pg_catalog.=) r.holder_pid
                  AND a.xact_start OPERATOR(pg_catalog.<)
                      (pg_catalog.now() OPERATOR(pg_catalog.-) COALESCE(r.timeout, pg_catalog.make_interval(mins => $2))))
 ORDER BY r.log_id
