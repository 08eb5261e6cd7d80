-- params: text, jsonb, timestamptz, integer, integer
-- queue_enqueue.sql for a database whose SQL objects are still older than
-- 0.3.0 (no producer_role yet), so that producers keep working until
-- ALTER EXTENSION pg_distlock UPDATE runs.
INSERT INTO distlock.task_queue (task_name, payload, run_after, priority, max_attempts)
VALUES ($1, $2, $3, $4, $5)
RETURNING id
