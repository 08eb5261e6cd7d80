-- params: text, jsonb, timestamptz, integer, integer
INSERT INTO distlock.task_queue (task_name, payload, run_after, priority, max_attempts)
VALUES ($1, $2, $3, $4, $5)
RETURNING id
