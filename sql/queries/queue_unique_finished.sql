-- params: text, text, interval, text[]
-- The newest job of queue $1 with unique key $2 completed within $3 of the
-- clock, if any (enqueue_task's p_unique_for): completions are stamped by
-- the clock, and a producer's transaction may be older than its window.
-- Only a job the caller's producer scope $4 admits (its name and its
-- group; NULL: every job) answers: a completed job holds no index entry,
-- so one the caller could not see is passed over, and the caller learns
-- nothing of it (completed_jobs_unique_key_idx).
SELECT id
  FROM distlock.completed_jobs
 WHERE queue OPERATOR(pg_catalog.=) $1
   AND unique_key OPERATOR(pg_catalog.=) $2
   AND completed_at OPERATOR(pg_catalog.>) (pg_catalog.clock_timestamp() OPERATOR(pg_catalog.-) $3)
   AND ($4 IS NULL OR (task_name OPERATOR(pg_catalog.^@) ANY ($4)
                      AND (group_key IS NULL OR group_key OPERATOR(pg_catalog.^@) ANY ($4))))
 ORDER BY completed_at DESC
 LIMIT 1
