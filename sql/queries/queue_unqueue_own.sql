-- params: bigint
-- Takes back job $1, which this transaction has just inserted: a job with
-- the same unique key completed within enqueue_task's p_unique_for.
DELETE FROM distlock.task_queue
 WHERE id OPERATOR(pg_catalog.=) $1
   AND pg_catalog.texteq(status, 'pending')
