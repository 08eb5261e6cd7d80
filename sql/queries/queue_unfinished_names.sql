-- params: bigint[]
-- The names, queues and holders' roles of the unfinished jobs among $1 (a
-- completed job cannot be settled again, so it needs none).
SELECT q.id, q.task_name, q.queue, q.holder_role FROM distlock.task_queue q WHERE q.id OPERATOR(pg_catalog.=) ANY ($1)
