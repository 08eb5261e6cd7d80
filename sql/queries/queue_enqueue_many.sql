-- params: text, jsonb[], timestamptz, integer, integer, oid, text, text
-- queue_enqueue.sql for many payloads: one job per element of $2, inserted
-- (and their ids returned) in the array's order, in group $8 (NULL: none).
INSERT INTO distlock.task_queue (task_name, payload, run_after, priority, max_attempts, producer_role, queue, group_key)
SELECT $1, p.payload, $3, $4, $5, $6, $7, $8
  FROM pg_catalog.unnest($2) WITH ORDINALITY AS p(payload, n)
 ORDER BY p.n
RETURNING id
