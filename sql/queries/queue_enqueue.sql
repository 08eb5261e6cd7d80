-- params: text, jsonb, timestamptz, integer, integer, oid
INSERT INTO distlock.task_queue (task_name, payload, run_after, priority, max_attempts, producer_role)
VALUES ($1, $2, $3, $4, $5, $6)
RETURNING id
