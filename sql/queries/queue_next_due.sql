-- When a job next becomes claimable with time alone, if at or before $2: a
-- lease running out, or a pending or failed job's run_after coming after $1.
-- NULL when none will before $2.
SELECT LEAST(
    (SELECT min(lease_expires_at)
       FROM distlock.task_queue
      WHERE status OPERATOR(pg_catalog.=) 'processing'),
    (SELECT min(run_after)
       FROM distlock.task_queue
      WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
        AND run_after OPERATOR(pg_catalog.>) $1
        AND run_after OPERATOR(pg_catalog.<=) $2))
