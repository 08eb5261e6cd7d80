-- params: text, bigint[]
-- queue_delete_dead.sql for SQL older than 0.4.0, which has no distlock.job_attempts:
-- it has no attempts to delete.
-- Deletes the dead jobs of queue $1 (any when NULL) among $2 (any when NULL).
DELETE FROM distlock.task_queue
 WHERE status OPERATOR(pg_catalog.=) 'dead'
   AND ($1::pg_catalog.text IS NULL OR queue OPERATOR(pg_catalog.=) $1)
   AND ($2::pg_catalog.int8[] IS NULL OR id OPERATOR(pg_catalog.=) ANY ($2))
RETURNING id, queue
