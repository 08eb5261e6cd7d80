-- params: timestamptz, timestamptz, text[], text[], oid
-- When a job next becomes claimable with time alone, if at or before $2: a
-- lease running out, or a pending or failed job's run_after coming after $1;
-- and that job's queue. No row when none will before $2. Only jobs whose
-- name and queue each start with one of the prefixes $3 (NULL: every job),
-- in one of the queues $4 (NULL: every queue) and in no paused queue count.
-- Run only by a consumer about to sleep, so one plan serves every consumer.
-- A prepared transaction of database $5 counts as a job due in a second
-- (below).
-- A lease that ran out at or before $1 belongs to a job the caller's claim
-- just skipped (its row is locked by an open transaction): it counts as due
-- one second after $1, so that a waiting consumer looks again once a second
-- instead of spinning until that transaction ends.
SELECT due, queue
  FROM ((SELECT GREATEST(lease_expires_at, $1 OPERATOR(pg_catalog.+) interval '1 second') AS due, queue
           FROM distlock.task_queue
          WHERE status OPERATOR(pg_catalog.=) 'processing'
            -- An index condition: the walk from the low end of the lease
            -- index stops at $2 rather than at the first live lease, past
            -- the dead versions a held snapshot leaves there (consume.rs,
            -- NEXT_DUE_HORIZON_US).
            AND lease_expires_at OPERATOR(pg_catalog.<=) $2
            AND ($4 IS NULL OR queue OPERATOR(pg_catalog.=) ANY ($4))
            AND (NOT EXISTS (SELECT FROM distlock.queue_settings s WHERE s.paused)
                 OR queue OPERATOR(pg_catalog.<>) ALL (ARRAY(SELECT s.queue FROM distlock.queue_settings s WHERE s.paused)))
            AND ($3 IS NULL OR (task_name OPERATOR(pg_catalog.^@) ANY ($3)
                           AND queue OPERATOR(pg_catalog.^@) ANY ($3)))
          ORDER BY lease_expires_at
          LIMIT 1)
        UNION ALL
        (SELECT run_after, queue
           FROM distlock.task_queue
          WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
            AND ($4 IS NULL OR queue OPERATOR(pg_catalog.=) ANY ($4))
            AND (NOT EXISTS (SELECT FROM distlock.queue_settings s WHERE s.paused)
                 OR queue OPERATOR(pg_catalog.<>) ALL (ARRAY(SELECT s.queue FROM distlock.queue_settings s WHERE s.paused)))
            AND run_after OPERATOR(pg_catalog.>) $1
            -- The due index holds only these: a job runnable when it was
            -- enqueued (created_at <= $1) cannot come due after $1.
            AND run_after OPERATOR(pg_catalog.>) created_at
            AND run_after OPERATOR(pg_catalog.<=) $2
            AND ($3 IS NULL OR (task_name OPERATOR(pg_catalog.^@) ANY ($3)
                           AND queue OPERATOR(pg_catalog.^@) ANY ($3)))
          ORDER BY run_after
          LIMIT 1)
        UNION ALL
        -- A prepared transaction of this database may hold claims, or
        -- jobs, that COMMIT PREPARED or ROLLBACK PREPARED makes runnable in
        -- a session that wakes nobody: look again in a second while there
        -- is one (with max_prepared_transactions at its default, 0, never).
        -- The function, not the view pg_prepared_xacts, which joins
        -- pg_authid and pg_database for names not needed here (prepared.rs).
        (SELECT $1 OPERATOR(pg_catalog.+) interval '1 second', NULL::pg_catalog.text
           FROM pg_catalog.pg_prepared_xact() p
          WHERE p.dbid OPERATOR(pg_catalog.=) $5
          LIMIT 1)) AS next
 ORDER BY due
 LIMIT 1
