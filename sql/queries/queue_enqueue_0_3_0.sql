-- params: text, jsonb, timestamptz, integer, integer, oid, text
-- queue_enqueue.sql for SQL older than 0.4.0, whose jobs have no group_key.
INSERT INTO distlock.task_queue (task_name, payload, run_after, priority, max_attempts, producer_role, queue)
VALUES ($1, $2, $3, $4, $5, $6, $7)
RETURNING id
