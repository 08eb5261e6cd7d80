-- params: timestamptz, timestamptz, text[]
-- queue_next_due.sql for 0.2.0's consume_task on a database not yet
-- updated to 0.3.0 (no queues).
-- When a job next becomes claimable with time alone, if at or before $2: a
-- lease running out, or a pending or failed job's run_after coming after $1.
-- NULL when none will before $2. The second column, the queue in
-- queue_next_due.sql, is NULL: 0.2.0's jobs have none. Only jobs whose names start with one of
-- the prefixes $3 (NULL: every job) count.
-- A lease that ran out at or before $1 belongs to a job the caller's claim
-- just skipped (its row is locked by an open transaction): it counts as due
-- one second after $1, so that a waiting consumer looks again once a second
-- instead of spinning until that transaction ends.
SELECT LEAST(
    (SELECT GREATEST(pg_catalog.min(lease_expires_at), $1 OPERATOR(pg_catalog.+) interval '1 second')
       FROM distlock.task_queue
      WHERE status OPERATOR(pg_catalog.=) 'processing'
        AND ($3 IS NULL OR EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                    WHERE pg_catalog.starts_with(task_name, s.prefix)))
     HAVING pg_catalog.min(lease_expires_at) IS NOT NULL),
    (SELECT pg_catalog.min(run_after)
       FROM distlock.task_queue
      WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
        AND run_after OPERATOR(pg_catalog.>) $1
        AND run_after OPERATOR(pg_catalog.<=) $2
        AND ($3 IS NULL OR EXISTS (SELECT FROM pg_catalog.unnest($3) AS s(prefix)
                                    WHERE pg_catalog.starts_with(task_name, s.prefix))))),
       NULL::pg_catalog.text AS queue
