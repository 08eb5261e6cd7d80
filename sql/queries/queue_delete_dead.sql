-- params: text, bigint[]
-- Deletes the dead jobs of queue $1 (any when NULL) among $2 (any when NULL),
-- and their attempts.
WITH deleted AS (
    DELETE FROM distlock.task_queue
     WHERE status OPERATOR(pg_catalog.=) 'dead'
       AND ($1::pg_catalog.text IS NULL OR queue OPERATOR(pg_catalog.=) $1)
       AND ($2::pg_catalog.int8[] IS NULL OR id OPERATOR(pg_catalog.=) ANY ($2))
    RETURNING id, queue
), forgotten AS (
    DELETE FROM distlock.job_attempts a
     USING deleted d
     WHERE a.job_id OPERATOR(pg_catalog.=) d.id
)
SELECT d.id, d.queue FROM deleted d
