-- The job queue: jobs are handed out with FOR UPDATE SKIP LOCKED and a
-- lease, so no session-level lock is involved (works behind PgBouncer in
-- transaction mode) and a crashed consumer's job comes back by itself.

CREATE TABLE distlock.task_queue (
    id               bigserial PRIMARY KEY,
    task_name        text NOT NULL,
    payload          jsonb NOT NULL DEFAULT '{}',
    status           varchar(20) NOT NULL DEFAULT 'pending',
    worker_id        text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    completed_at     timestamptz,
    -- Claims so far, the current one included.
    attempts         int NOT NULL DEFAULT 0,
    max_attempts     int NOT NULL DEFAULT 5,
    -- Not handed out before this time (delayed jobs and retry backoff).
    run_after        timestamptz NOT NULL DEFAULT now(),
    -- Higher runs first.
    priority         int NOT NULL DEFAULT 0,
    -- A processing job whose lease has expired can be claimed again.
    lease_expires_at timestamptz,
    last_error       text,
    -- No CHECK constraints: PostgreSQL reads a table's CHECK expressions
    -- back from their stored form for every INSERT and UPDATE statement,
    -- which was 7 % of a consumer's server time. Only the extension's owner
    -- writes this table, through the queue functions, which check every
    -- value they store (names, attempts, leases) and keep status and
    -- lease_expires_at together: processing exactly when a lease is set.
    -- The role of the consumer holding the job (an OID, see lease_state).
    holder_role      oid,
    -- The role that enqueued the job (an OID; NULL for jobs enqueued before 0.3.0).
    producer_role    oid,
    -- Consumers name the queues they take jobs from (consume_task's p_queues).
    queue            text NOT NULL DEFAULT 'default',
    -- At most one unfinished job per (queue, unique_key) (enqueue_task's p_unique_key).
    unique_key       text,
    -- The job's group within its queue (enqueue_task's p_group): a name,
    -- tested against producers' scopes as the job's name and queue are.
    group_key        text
);

COMMENT ON TABLE distlock.task_queue IS
    'Queued jobs handed out to consumers with leases (pending, processing, completed, failed, dead).';

-- The next runnable job: highest priority, then oldest.
CREATE INDEX task_queue_runnable_idx
    ON distlock.task_queue (priority DESC, run_after, id)
    WHERE status IN ('pending', 'failed');

-- The next runnable job of given queues: a consumer of a queue with ten
-- jobs does not step over the million runnable jobs of other queues.
CREATE INDEX task_queue_queue_runnable_idx
    ON distlock.task_queue (queue, priority DESC, run_after, id)
    WHERE status IN ('pending', 'failed');

-- When the next job scheduled for later comes due: what a consumer about to
-- wait reads (its sleep ends then). Without it that read stepped over every
-- runnable job, which a queue full at its concurrency limit has many of.
-- Only jobs scheduled later than their enqueue (delayed jobs, retries): a
-- job runnable from its enqueue on never comes due with time, and leaving
-- it out spares each enqueue an index entry, and the index the entries of
-- claimed jobs that nothing but vacuum removes (a count of pending jobs by
-- bitmap scan read 94,000 of them with 64 consumers at work).
CREATE INDEX task_queue_due_idx
    ON distlock.task_queue (run_after)
    WHERE status IN ('pending', 'failed') AND run_after > created_at;

-- Unique jobs: one pending, failed (awaiting its retry) or processing job per
-- key and queue. Completed and dead jobs free their key, so a key names a
-- piece of work still to be done, not one ever done.
CREATE UNIQUE INDEX task_queue_unique_key_idx
    ON distlock.task_queue (queue, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('pending', 'failed', 'processing');

-- Expired leases.
CREATE INDEX task_queue_lease_idx
    ON distlock.task_queue (lease_expires_at)
    WHERE status = 'processing';

-- Completed jobs move out of the queue into an insert-only archive: the
-- table the claims read keeps only work still to do (and dead jobs, which
-- wait for a person), and a completion writes a small delete there instead
-- of a whole new row version that retention would delete again later.
-- Measured: 1.4-1.9x the jobs/s of completing in place for a fleet of 16
-- consumers (docs/performance.md, "Finished jobs").
CREATE TABLE distlock.completed_jobs (
    id            bigint PRIMARY KEY,
    queue         text NOT NULL,
    task_name     text NOT NULL,
    payload       jsonb NOT NULL,
    worker_id     text,
    created_at    timestamptz NOT NULL,
    started_at    timestamptz,
    completed_at  timestamptz NOT NULL,
    attempts      int NOT NULL,
    max_attempts  int NOT NULL,
    run_after     timestamptz NOT NULL,
    priority      int NOT NULL,
    -- The error of the last failed attempt, if one failed before.
    last_error    text,
    holder_role   oid,
    producer_role oid,
    unique_key    text,
    group_key     text
);

COMMENT ON TABLE distlock.completed_jobs IS
    'Completed jobs, moved out of distlock.task_queue by their completion; prune_jobs deletes old ones.';

-- Retention deletes the oldest: completion order is insertion order, which
-- a BRIN index summarises in a few pages.
CREATE INDEX completed_jobs_completed_at_idx ON distlock.completed_jobs USING brin (completed_at);

-- The completed holders of a unique key, newest first: enqueue_task's
-- p_unique_for looks here, and the console's search by key (which names no
-- queue: so the key leads). Only keyed jobs have an entry.
CREATE INDEX completed_jobs_unique_key_idx
    ON distlock.completed_jobs (unique_key, queue, completed_at)
    WHERE unique_key IS NOT NULL;

-- Each attempt that ended without success (issue 47, item 5): written by the
-- statement that ended it (fail_task, fail_tasks and the fail arrays of
-- settle_and_consume_tasks; the sweep and a limited queue's claim taking back
-- an expired lease; a claim taking one over; requeue_jobs), in that
-- statement, so that an attempt and its record commit together. A worker's
-- error is kept cut to 16,384 characters. Insert-only, and nothing for an attempt that
-- succeeded: a queue that does not fail writes nothing here. Deleted with its
-- job (prune_jobs, delete_dead_jobs, purge_queue). outcome is what became of
-- the job: failed (retried later), dead (no attempt left), expired (its lease
-- ran out and it was put back or taken over) or requeued (an admin took it
-- back). No CHECK
-- constraints, as on task_queue: only the queue functions write it.
CREATE TABLE distlock.job_attempts (
    job_id     bigint NOT NULL,
    -- The job's attempts when this one ended (its claims so far).
    attempt    int NOT NULL,
    worker_id  text,
    started_at timestamptz,
    ended_at   timestamptz NOT NULL,
    outcome    text NOT NULL,
    error      text,
    PRIMARY KEY (job_id, attempt)
);

COMMENT ON TABLE distlock.job_attempts IS
    'Attempts of jobs that ended without success (failed, dead, expired, requeued), with their errors; readable by admins.';

-- TRUNCATE distlock.task_queue RESTART IDENTITY starts job ids over, at ids
-- that completed_jobs still holds (each completion of such a job failed with
-- 23505 and the job ran again until it was dead) and at ids of jobs that
-- consumers may still hold (whose stale settles would then settle another
-- job). So before any TRUNCATE of the queue, the id sequence's start moves
-- above the highest id in use, which is where RESTART IDENTITY restarts it:
-- no id is handed out twice. It fires ALWAYS, also where
-- session_replication_role is replica (a logical-replication subscriber
-- applying a TRUNCATE). (distlock.purge_queue empties one queue and reuses
-- no id either.)
CREATE FUNCTION distlock.keep_job_ids_unique() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    in_use bigint;
BEGIN
    SELECT GREATEST((SELECT pg_catalog.max(q.id) FROM distlock.task_queue q),
                    (SELECT pg_catalog.max(c.id) FROM distlock.completed_jobs c),
                    (SELECT s.last_value FROM distlock.task_queue_id_seq s))
      INTO in_use;
    EXECUTE pg_catalog.format('ALTER SEQUENCE distlock.task_queue_id_seq START WITH %s',
                              in_use OPERATOR(pg_catalog.+) 1);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION distlock.keep_job_ids_unique() FROM PUBLIC;
CREATE TRIGGER keep_job_ids_unique BEFORE TRUNCATE ON distlock.task_queue
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.keep_job_ids_unique();
ALTER TABLE distlock.task_queue ENABLE ALWAYS TRIGGER keep_job_ids_unique;

-- TRUNCATE of the queue or of its archive removes jobs without the
-- statements that delete their attempts with them (prune_jobs,
-- delete_dead_jobs, purge_queue): the attempts of jobs in neither table go
-- too, so that none is kept for ever. (No id is reused meanwhile:
-- keep_job_ids_unique.) TRUNCATE holds the truncated table, so no job
-- moves between the two while it runs.
CREATE FUNCTION distlock.forget_truncated_attempts() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- Only in READ COMMITTED, where this statement's snapshot sees every
    -- job moved before the TRUNCATE took its lock: under an older snapshot
    -- (REPEATABLE READ, SERIALIZABLE) a job completed meanwhile looked gone
    -- and its history was deleted (review helper-83). There the attempts
    -- stay, of no job: no id is reused (keep_job_ids_unique).
    IF pg_catalog.current_setting('transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed' THEN
        RETURN NULL;
    END IF;
    DELETE FROM distlock.job_attempts a
     WHERE NOT EXISTS (SELECT FROM distlock.task_queue q WHERE q.id OPERATOR(pg_catalog.=) a.job_id)
       AND NOT EXISTS (SELECT FROM distlock.completed_jobs c WHERE c.id OPERATOR(pg_catalog.=) a.job_id);
    RETURN NULL;
END
$$;
REVOKE ALL ON FUNCTION distlock.forget_truncated_attempts() FROM PUBLIC;
CREATE TRIGGER forget_truncated_attempts AFTER TRUNCATE ON distlock.task_queue
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.forget_truncated_attempts();
CREATE TRIGGER forget_truncated_attempts AFTER TRUNCATE ON distlock.completed_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.forget_truncated_attempts();
-- ALWAYS, as keep_job_ids_unique: also where session_replication_role is
-- replica (a logical-replication subscriber applying a TRUNCATE).
ALTER TABLE distlock.task_queue ENABLE ALWAYS TRIGGER forget_truncated_attempts;
ALTER TABLE distlock.completed_jobs ENABLE ALWAYS TRIGGER forget_truncated_attempts;

-- Every job, queued or finished, in one relation with its status.
CREATE VIEW distlock.jobs AS
SELECT id, queue, task_name, payload, status, worker_id, created_at, started_at,
       completed_at, attempts, max_attempts, run_after, priority, lease_expires_at, last_error,
       holder_role, producer_role, unique_key, group_key
  FROM distlock.task_queue
UNION ALL
SELECT id, queue, task_name, payload, 'completed'::varchar(20), worker_id, created_at, started_at,
       completed_at, attempts, max_attempts, run_after, priority, NULL, last_error,
       holder_role, producer_role, unique_key, group_key
  FROM distlock.completed_jobs;

COMMENT ON VIEW distlock.jobs IS
    'Every job with its status: distlock.task_queue and distlock.completed_jobs together.';

-- Every job leaves two dead row versions (its claim and its completion's delete).
-- Vacuum once 2 % of the table has changed rather than PostgreSQL's default
-- 20 %, so that a queue keeping a million finished jobs is cleaned as often
-- as a small one and its indexes stay free of dead entries.
ALTER TABLE distlock.task_queue SET (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000);

-- Per-queue settings; a queue without a row is running and unlimited.
CREATE TABLE distlock.queue_settings (
    queue      text PRIMARY KEY,
    -- A paused queue hands out nothing; its waiting consumers keep waiting.
    paused     boolean NOT NULL DEFAULT false,
    -- At most this many jobs of the queue processing at once (NULL: no limit).
    max_processing int,
    updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE distlock.queue_settings IS
    'Per-queue settings (pause_queue, resume_queue, set_queue_limit); queues without a row run unlimited.';

CREATE VIEW distlock.queues WITH (security_barrier) AS
WITH unfinished AS (
    SELECT q.queue,
           count(*) FILTER (WHERE q.status = 'pending') AS pending,
           count(*) FILTER (WHERE q.status = 'processing') AS processing,
           count(*) FILTER (WHERE q.status = 'failed') AS failed,
           count(*) FILTER (WHERE q.status = 'dead') AS dead,
           min(q.created_at) FILTER (WHERE q.status = 'pending') AS oldest_pending
      FROM distlock.task_queue q
     GROUP BY q.queue),
-- The archive keeps every completed job until prune_jobs: counting all of
-- them would cost a scan of millions of rows, the last hour a BRIN range.
recent AS (
    SELECT c.queue, count(*) AS completed
      FROM distlock.completed_jobs c
     WHERE c.completed_at > pg_catalog.now() - interval '1 hour'
     GROUP BY c.queue)
SELECT n.queue AS name,
       COALESCE(s.paused, false) AS paused,
       s.max_processing,
       COALESCE(u.pending, 0) AS pending,
       COALESCE(u.processing, 0) AS processing,
       COALESCE(u.failed, 0) AS failed,
       COALESCE(u.dead, 0) AS dead,
       COALESCE(r.completed, 0) AS completed_last_hour,
       pg_catalog.now() - u.oldest_pending AS oldest_pending_age
  FROM (SELECT queue FROM distlock.queue_settings
        UNION
        SELECT queue FROM unfinished
        UNION
        SELECT queue FROM recent) n
  LEFT JOIN distlock.queue_settings s ON s.queue = n.queue
  LEFT JOIN unfinished u ON u.queue = n.queue
  LEFT JOIN recent r ON r.queue = n.queue
 WHERE distlock.in_monitor_scope(n.queue);

COMMENT ON VIEW distlock.queues IS
    'Queues with their settings, their unfinished jobs counted by status and the jobs completed in the last hour.';

-- Per queue and minute of the last hour: jobs completed and jobs that died
-- (failed their last attempt). A failure that is retried is not timestamped.
CREATE VIEW distlock.queue_throughput WITH (security_barrier) AS
SELECT e.queue, e.minute, sum(e.completed)::bigint AS completed, sum(e.died)::bigint AS died
  FROM (SELECT c.queue, pg_catalog.date_trunc('minute', c.completed_at) AS minute, count(*) AS completed, 0 AS died
          FROM distlock.completed_jobs c
         WHERE c.completed_at >= pg_catalog.date_trunc('minute', pg_catalog.now()) - interval '59 minutes'
         GROUP BY 1, 2
        UNION ALL
        SELECT d.queue, pg_catalog.date_trunc('minute', d.completed_at), 0, count(*)
          FROM distlock.task_queue d
         WHERE d.status = 'dead'
           AND d.completed_at >= pg_catalog.date_trunc('minute', pg_catalog.now()) - interval '59 minutes'
         GROUP BY 1, 2) e
 WHERE distlock.in_monitor_scope(e.queue)
 GROUP BY e.queue, e.minute;

COMMENT ON VIEW distlock.queue_throughput IS
    'Jobs completed and jobs that died per queue and minute, over the last hour.';

-- How long runnable jobs waited for a consumer: from when a job could run
-- (created_at, or run_after for a delayed or retried job) to the claim that
-- completed it, over the jobs completed in the last hour.
CREATE VIEW distlock.queue_latency WITH (security_barrier) AS
SELECT c.queue,
       count(*) AS jobs,
       pg_catalog.percentile_cont(0.5) WITHIN GROUP (ORDER BY w.wait) AS wait_p50,
       pg_catalog.percentile_cont(0.95) WITHIN GROUP (ORDER BY w.wait) AS wait_p95,
       pg_catalog.percentile_cont(0.99) WITHIN GROUP (ORDER BY w.wait) AS wait_p99,
       max(w.wait) AS wait_max
  FROM distlock.completed_jobs c
 CROSS JOIN LATERAL (SELECT GREATEST(c.started_at - GREATEST(c.created_at, c.run_after), interval '0') AS wait) w
 WHERE c.completed_at > pg_catalog.now() - interval '1 hour'
   AND c.started_at IS NOT NULL
 GROUP BY c.queue
HAVING distlock.in_monitor_scope(c.queue);

COMMENT ON VIEW distlock.queue_latency IS
    'Per queue, how long jobs completed in the last hour waited from runnable to started: percentiles and maximum.';

-- The same waits as distlock.queue_latency, as a cumulative histogram: per
-- queue and upper bound `le` in seconds, the jobs that waited less (the last
-- bound is infinite: every job). Shaped for Prometheus' histogram_quantile.
CREATE VIEW distlock.queue_wait_histogram WITH (security_barrier) AS
WITH bounds AS (
    SELECT ARRAY[0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600]::float8[] AS le
),
-- A job's bucket: how many bounds its wait reached.
per_bucket AS (
    SELECT c.queue,
           pg_catalog.width_bucket(
               pg_catalog.date_part('epoch', GREATEST(c.started_at - GREATEST(c.created_at, c.run_after), interval '0')),
               b.le) AS reached,
           count(*) AS jobs
      FROM distlock.completed_jobs c, bounds b
     WHERE c.completed_at > pg_catalog.now() - interval '1 hour'
       AND c.started_at IS NOT NULL
     GROUP BY 1, 2
)
SELECT p.queue,
       u.le,
       COALESCE(sum(p.jobs) FILTER (WHERE p.reached < u.i), 0)::bigint AS jobs
  FROM per_bucket p, bounds b,
       LATERAL pg_catalog.unnest(b.le || 'Infinity'::float8) WITH ORDINALITY u(le, i)
 GROUP BY p.queue, u.le, u.i
HAVING distlock.in_monitor_scope(p.queue);

COMMENT ON VIEW distlock.queue_wait_histogram IS
    'Per queue, jobs completed in the last hour by how long they waited from runnable to started: cumulative counts below each bound in seconds.';

CREATE VIEW distlock.queue_stats WITH (security_barrier) AS
SELECT q.task_name,
       q.status,
       count(*) AS jobs,
       pg_catalog.now() - min(q.created_at) FILTER (WHERE q.status = 'pending') AS oldest_pending_age,
       min(q.run_after) FILTER (WHERE q.status IN ('pending', 'failed')) AS next_run_after,
       count(*) FILTER (WHERE q.status = 'processing'
                          AND q.lease_expires_at <= pg_catalog.now()) AS expired_leases
  FROM distlock.jobs q
 GROUP BY q.task_name, q.status
HAVING distlock.in_monitor_scope(q.task_name);

COMMENT ON VIEW distlock.queue_stats IS
    'Jobs per task name and status, with the age of the oldest pending job.';
