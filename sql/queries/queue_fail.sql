-- params: bigint, text, text, integer
-- A failed attempt: retried after 10 s * 2^(attempts - 1), capped at 1 hour,
-- jittered to 50-100 %; dead once max_attempts attempts have been made.
-- The attempt and its error are recorded in distlock.job_attempts in the
-- same statement (once: a second record of one attempt is not written).
-- The status is tested with texteq rather than =: a condition the lease
-- index's predicate (status = 'processing') matches would let the planner
-- read the job by scanning that index, every processing job and every dead
-- entry of one, when statistics from a quiet moment call it empty. The
-- primary key finds the job in one step whatever the statistics say.
WITH failed AS (
    UPDATE distlock.task_queue
       SET status = CASE WHEN attempts OPERATOR(pg_catalog.>=) max_attempts THEN 'dead' ELSE 'failed' END,
           completed_at = CASE WHEN attempts OPERATOR(pg_catalog.>=) max_attempts THEN pg_catalog.clock_timestamp() END,
           run_after = CASE WHEN attempts OPERATOR(pg_catalog.>=) max_attempts THEN run_after
                            ELSE pg_catalog.clock_timestamp()
                                 OPERATOR(pg_catalog.+)
                                 (LEAST(interval '10 seconds'
                                        OPERATOR(pg_catalog.*) pg_catalog.power(2, LEAST(attempts OPERATOR(pg_catalog.-) 1, 20)),
                                        interval '1 hour')
                                  OPERATOR(pg_catalog.*) (0.5 OPERATOR(pg_catalog.+) (pg_catalog.random() OPERATOR(pg_catalog./) 2)))
                       END,
           lease_expires_at = NULL,
           last_error = $3
     WHERE id OPERATOR(pg_catalog.=) $1 AND pg_catalog.texteq(status, 'processing')
       AND worker_id OPERATOR(pg_catalog.=) $2
       AND ($4::int IS NULL OR attempts OPERATOR(pg_catalog.=) $4)
    RETURNING id, holder_role, queue, priority, run_after, status OPERATOR(pg_catalog.=) 'dead' AS dead,
              attempts, worker_id, started_at, last_error
), recorded AS (
    INSERT INTO distlock.job_attempts (job_id, attempt, worker_id, started_at, ended_at, outcome, error)
    SELECT f.id, f.attempts, f.worker_id, f.started_at, pg_catalog.clock_timestamp(),
           CASE WHEN f.dead THEN 'dead' ELSE 'failed' END,
           -- Kept for the job's life, once per attempt: cut, so that a worker
           -- failing with megabytes of text cannot grow it by that each time
           -- (last_error keeps the latest whole). SQL_ASCII counts bytes, and
           -- a cut inside a UTF-8 character would leave text no UTF-8 client
           -- can read (22021): a character the cut reaches goes whole.
           CASE WHEN pg_catalog.length(f.last_error) OPERATOR(pg_catalog.<=) 16384 THEN f.last_error
                WHEN pg_catalog.getdatabaseencoding() OPERATOR(pg_catalog.=) 'SQL_ASCII'
                THEN pg_catalog.regexp_replace(pg_catalog.left(f.last_error, 16384), E'[\\xc0-\\xff][\\x80-\\xbf]*$', '')
                ELSE pg_catalog.left(f.last_error, 16384) END
      FROM failed f
        ON CONFLICT (job_id, attempt) DO NOTHING
)
SELECT f.id, f.holder_role, f.queue, f.priority, f.run_after, f.dead FROM failed f
