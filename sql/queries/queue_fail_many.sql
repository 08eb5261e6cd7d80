-- params: bigint[], text, integer[], text[]
-- queue_fail.sql for the jobs $1 that worker $2 holds: job $1[i] only in
-- attempt $3[i] (any when NULL), with error $4[i] (ROWS FROM pads missing
-- arrays with NULLs). Each attempt and its error are recorded in
-- distlock.job_attempts in the same statement, once.
-- The status is tested with texteq rather than =, and the ids also with
-- = ANY: the planner then finds each job through the primary key, never by
-- scanning the lease index (every processing job and every dead entry of
-- one), which statistics from a quiet moment call empty.
WITH failed AS (
    UPDATE distlock.task_queue q
       SET status = CASE WHEN q.attempts OPERATOR(pg_catalog.>=) q.max_attempts THEN 'dead' ELSE 'failed' END,
           completed_at = CASE WHEN q.attempts OPERATOR(pg_catalog.>=) q.max_attempts THEN pg_catalog.clock_timestamp() END,
           run_after = CASE WHEN q.attempts OPERATOR(pg_catalog.>=) q.max_attempts THEN q.run_after
                            ELSE pg_catalog.clock_timestamp()
                                 OPERATOR(pg_catalog.+)
                                 (LEAST(interval '10 seconds'
                                        OPERATOR(pg_catalog.*) pg_catalog.power(2, LEAST(q.attempts OPERATOR(pg_catalog.-) 1, 20)),
                                        interval '1 hour')
                                  OPERATOR(pg_catalog.*) (0.5 OPERATOR(pg_catalog.+) (pg_catalog.random() OPERATOR(pg_catalog./) 2)))
                       END,
           lease_expires_at = NULL,
           last_error = j.error
      FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.int8[]), pg_catalog.unnest($3::pg_catalog.int4[]),
                      pg_catalog.unnest($4::pg_catalog.text[])) AS j (id, attempt, error)
     WHERE q.id OPERATOR(pg_catalog.=) j.id
       AND q.id OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.int8[])
       AND pg_catalog.texteq(q.status, 'processing')
       AND q.worker_id OPERATOR(pg_catalog.=) $2
       AND (j.attempt IS NULL OR q.attempts OPERATOR(pg_catalog.=) j.attempt)
    RETURNING q.id, q.holder_role, q.queue, q.priority, q.run_after, q.status OPERATOR(pg_catalog.=) 'dead' AS dead,
              q.attempts, q.worker_id, q.started_at, q.last_error
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
