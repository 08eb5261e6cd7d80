-- params: text, jsonb, timestamptz, integer, integer, oid, text, text
-- $8: the job's group (NULL: none).
INSERT INTO distlock.task_queue (task_name, payload, run_after, priority, max_attempts, producer_role, queue, group_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
RETURNING id
