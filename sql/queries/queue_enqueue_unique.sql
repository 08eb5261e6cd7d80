-- params: text, jsonb, timestamptz, integer, integer, oid, text, text, text
-- queue_enqueue.sql with unique key $8: nothing when queue $7 already has
-- an unfinished job with that key (task_queue_unique_key_idx). A producer
-- racing another with the same key waits for the other's transaction and
-- then inserts nothing, or inserts when the other rolled back. $9: the
-- job's group (NULL: none).
INSERT INTO distlock.task_queue (task_name, payload, run_after, priority, max_attempts, producer_role, queue, unique_key, group_key)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
ON CONFLICT (queue, unique_key)
   WHERE unique_key IS NOT NULL AND status OPERATOR(pg_catalog.=) ANY (ARRAY['pending', 'failed', 'processing'])
   DO NOTHING
RETURNING id
