-- params: bigint, text, interval, oid, timestamptz, text[], text, boolean, integer, timestamptz, bigint
-- Claims up to $1 jobs for worker $2 of role $4 with a lease of $3, at time
-- $5 (a parameter, not clock_timestamp(), so that it is an index condition).
-- Claimable: a job whose consumer's lease ran out (taken over, counting an
-- attempt, or made dead when none is left; the caller drops those rows;
-- the attempt that ran out is recorded in distlock.job_attempts),
-- then pending and failed jobs whose run_after has come, highest priority
-- and oldest first. Lease takeover is part of every claim, so no job waits
-- for a sweep and no claim pays for a separate reaping statement.
-- $6: the consumer's scope: jobs whose name and queue each start with one
-- of these prefixes (NULL: every job). queue_consume.sql for jobs of queue $7 only, a
-- separate statement so that its plan always reads the queue's index, whose
-- order is the claim's. Nothing when the queue is paused, nor when it has a
-- concurrency limit unless $8 (the caller holds the queue's claim turn and
-- asks for no more than the room left).
-- $9, $10, $11: where in the claim's index to start (see claim_start.rs), a
-- priority and the run_after and id to start from within it. Jobs of a
-- higher priority still come first; the caller passes the head of the
-- index (priority 2147483647, run_after -infinity, the lowest bigint id)
-- to read it all.
WITH expired AS (
    SELECT id
      FROM distlock.task_queue
     WHERE status OPERATOR(pg_catalog.=) 'processing'
       AND lease_expires_at OPERATOR(pg_catalog.<=) $5
       AND queue OPERATOR(pg_catalog.=) $7
       AND NOT EXISTS (SELECT FROM distlock.queue_settings s
                        WHERE s.queue OPERATOR(pg_catalog.=) $7
                          AND (s.paused OR (s.max_processing IS NOT NULL AND NOT $8)))
       AND ($6 IS NULL OR (task_name OPERATOR(pg_catalog.^@) ANY ($6)
                      AND queue OPERATOR(pg_catalog.^@) ANY ($6)))
     ORDER BY lease_expires_at
     LIMIT $1
       FOR UPDATE SKIP LOCKED
), runnable_higher AS (
    -- Runnable jobs in three ranges of the claim's index, read in its
    -- order: those of a higher priority than where to start, those of the
    -- same priority from there on, those of a lower priority.
    SELECT id
      FROM distlock.task_queue
     WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
       AND queue OPERATOR(pg_catalog.=) $7
       AND NOT EXISTS (SELECT FROM distlock.queue_settings s
                        WHERE s.queue OPERATOR(pg_catalog.=) $7
                          AND (s.paused OR (s.max_processing IS NOT NULL AND NOT $8)))
       AND run_after OPERATOR(pg_catalog.<=) $5
       AND ($6 IS NULL OR (task_name OPERATOR(pg_catalog.^@) ANY ($6)
                      AND queue OPERATOR(pg_catalog.^@) ANY ($6)))
       AND priority OPERATOR(pg_catalog.>) $9
     ORDER BY priority DESC, run_after, id
     LIMIT $1
       FOR UPDATE SKIP LOCKED
), runnable_from_start AS (
    SELECT id
      FROM distlock.task_queue
     WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
       AND queue OPERATOR(pg_catalog.=) $7
       AND NOT EXISTS (SELECT FROM distlock.queue_settings s
                        WHERE s.queue OPERATOR(pg_catalog.=) $7
                          AND (s.paused OR (s.max_processing IS NOT NULL AND NOT $8)))
       AND run_after OPERATOR(pg_catalog.<=) $5
       AND ($6 IS NULL OR (task_name OPERATOR(pg_catalog.^@) ANY ($6)
                      AND queue OPERATOR(pg_catalog.^@) ANY ($6)))
       AND priority OPERATOR(pg_catalog.=) $9
       AND (run_after, id) OPERATOR(pg_catalog.>=) ($10, $11)
     ORDER BY priority DESC, run_after, id
     LIMIT $1
       FOR UPDATE SKIP LOCKED
), runnable_lower AS (
    SELECT id
      FROM distlock.task_queue
     WHERE status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed'])
       AND queue OPERATOR(pg_catalog.=) $7
       AND NOT EXISTS (SELECT FROM distlock.queue_settings s
                        WHERE s.queue OPERATOR(pg_catalog.=) $7
                          AND (s.paused OR (s.max_processing IS NOT NULL AND NOT $8)))
       AND run_after OPERATOR(pg_catalog.<=) $5
       AND ($6 IS NULL OR (task_name OPERATOR(pg_catalog.^@) ANY ($6)
                      AND queue OPERATOR(pg_catalog.^@) ANY ($6)))
       AND priority OPERATOR(pg_catalog.<) $9
     ORDER BY priority DESC, run_after, id
     LIMIT $1
       FOR UPDATE SKIP LOCKED
), next AS (
    -- Evaluated lazily: each range is read only for what those before it
    -- did not fill.
    SELECT id FROM expired
    UNION ALL
    SELECT id FROM runnable_higher
    UNION ALL
    SELECT id FROM runnable_from_start
    UNION ALL
    SELECT id FROM runnable_lower
    LIMIT $1
), taken AS (
    -- A claim deletes the version it claims and inserts the next one
    -- rather than updating it in place. A consumer whose snapshot still
    -- sees the job runnable then finds the row deleted and skips it; after
    -- an update, FOR UPDATE in READ COMMITTED follows the row to its new
    -- version and locks it before rechecking, and that lock, held until
    -- that consumer's commit, made the job's holder wait for it to settle
    -- the job (16 consumers: 15 % of their time, the settle 13 times slower).
    DELETE FROM distlock.task_queue q
     USING next
     WHERE q.id OPERATOR(pg_catalog.=) next.id
    RETURNING q.*
), takeover_recorded AS (
    -- A taken-over attempt ended without success: recorded in
    -- distlock.job_attempts in the same statement (expired, or dead when no
    -- attempt is left), once. Read from taken (kept anyway, as a
    -- data-modifying CTE's rows), not from claimed, which a second reader
    -- would make the claim materialize: a claim with no takeover inserts
    -- nothing.
    INSERT INTO distlock.job_attempts (job_id, attempt, worker_id, started_at, ended_at, outcome, error)
    SELECT t.id, t.attempts, t.worker_id, t.started_at, $5,
           CASE WHEN t.attempts OPERATOR(pg_catalog.>=) t.max_attempts THEN 'dead' ELSE 'expired' END,
           CASE WHEN t.attempts OPERATOR(pg_catalog.>=) t.max_attempts
                THEN 'lease expired, no attempt left (worker '
                ELSE 'lease expired (worker ' END
           OPERATOR(pg_catalog.||) COALESCE(t.worker_id, '?') OPERATOR(pg_catalog.||) ')'
      FROM taken t
     WHERE t.status OPERATOR(pg_catalog.=) 'processing'
        ON CONFLICT (job_id, attempt) DO NOTHING
), claimed AS (
    -- A taken-over job whose attempts are used up is dead instead.
    SELECT t.*, (t.status OPERATOR(pg_catalog.=) 'processing'
                 AND t.attempts OPERATOR(pg_catalog.>=) t.max_attempts) AS dies
      FROM taken t
)
INSERT INTO distlock.task_queue AS q (id, task_name, payload, status, worker_id, created_at, started_at, completed_at,
                                      attempts, max_attempts, run_after, priority, lease_expires_at, last_error,
                                      holder_role, producer_role, queue, unique_key, group_key)
SELECT c.id, c.task_name, c.payload,
       CASE WHEN c.dies THEN 'dead' ELSE 'processing' END,
       CASE WHEN c.dies THEN c.worker_id ELSE $2 END,
       c.created_at,
       $5,
       CASE WHEN c.dies THEN $5 END,
       CASE WHEN c.dies THEN c.attempts ELSE c.attempts OPERATOR(pg_catalog.+) 1 END,
       c.max_attempts, c.run_after, c.priority,
       CASE WHEN c.dies THEN NULL ELSE $5 OPERATOR(pg_catalog.+) $3 END,
       -- The takeover's mark only on a job taken over (claim.rs): one
       -- that dies here may be retried later, and would carry it into
       -- the runnable index.
       CASE WHEN c.dies
            THEN 'lease expired, no attempt left (worker ' OPERATOR(pg_catalog.||) COALESCE(c.worker_id, '?') OPERATOR(pg_catalog.||) ')'
            WHEN c.status OPERATOR(pg_catalog.=) 'processing'
            THEN 'lease expired (worker ' OPERATOR(pg_catalog.||) COALESCE(c.worker_id, '?') OPERATOR(pg_catalog.||) ')'
            -- A runnable job can carry the mark's text from elsewhere (a
            -- consumer's fail_task text, a job an older release's sweep put
            -- back or that died at its takeover, retried since): said as the
            -- sweep says it, so that only a takeover carries the mark.
            WHEN pg_catalog.starts_with(c.last_error, 'lease expired (worker ')
            THEN 'lease expired, put back (worker '
                 OPERATOR(pg_catalog.||) pg_catalog.substr(c.last_error, pg_catalog.length('lease expired (worker ') OPERATOR(pg_catalog.+) 1)
            ELSE c.last_error END,
       CASE WHEN c.dies THEN c.holder_role ELSE $4 END,
       c.producer_role, c.queue, c.unique_key, c.group_key
  FROM claimed c
RETURNING q.id, q.task_name, q.payload, q.attempts, q.max_attempts, q.lease_expires_at, q.priority,
          q.status OPERATOR(pg_catalog.=) 'processing', q.run_after,
          -- Whether the job was taken over from an expired lease (the
          -- message set above, which no runnable job keeps): such a job says nothing
          -- of where the runnable jobs this claim read end. Read from the
          -- row rather than by joining the claimed rows, which cost the
          -- one-job loop 7-10 %.
          pg_catalog.starts_with(q.last_error, 'lease expired (worker '),
          -- The job's queue, handed to the consumer (0.4.0) and counted by
          -- the queue counters (counters.rs), with when the job became
          -- runnable (the later of this and run_after), and its group
          -- (0.4.0).
          q.queue, q.created_at, q.group_key
