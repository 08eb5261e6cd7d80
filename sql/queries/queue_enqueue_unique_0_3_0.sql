-- params: text, jsonb, timestamptz, integer, integer, oid, text, text
-- queue_enqueue_unique.sql for SQL older than 0.4.0, whose jobs have no group_key.
-- queue_enqueue.sql with unique key $8: nothing when queue $7 already has
-- an unfinished job with that key (task_queue_unique_key_idx). A producer
-- racing another with the same key waits for the other's transaction and
-- then inserts nothing, or inserts when the other rolled back.
INSERT INTO distlock.task_queue (task_name, payload, run_after, priority, max_attempts, producer_role, queue, unique_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (queue, unique_key)
   WHERE unique_key IS NOT NULL AND status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed', 'processing'])
   DO NOTHING
RETURNING id
