-- params: bigint[]
-- The names and queues of the unfinished jobs among $1 (a completed job
-- cannot be settled again, so it needs none).
SELECT q.id, q.task_name, q.queue FROM distlock.task_queue q WHERE q.id OPERATOR(pg_catalog.=) ANY ($1)
