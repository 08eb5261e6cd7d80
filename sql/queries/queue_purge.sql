-- params: text, boolean
-- Deletes the jobs of queue $1 that are pending, failed or dead, and with $2
-- those processing too, and their attempts. Rows a consumer is settling
-- right now are skipped.
WITH purged AS (
    SELECT id
      FROM distlock.task_queue
     WHERE queue OPERATOR(pg_catalog.=) $1
       AND (status OPERATOR(pg_catalog.<>) 'processing' OR $2)
       FOR UPDATE SKIP LOCKED
), deleted AS (
    DELETE FROM distlock.task_queue q
     USING purged
     WHERE q.id OPERATOR(pg_catalog.=) purged.id
    RETURNING q.id
), forgotten AS (
    DELETE FROM distlock.job_attempts a
     USING deleted d
     WHERE a.job_id OPERATOR(pg_catalog.=) d.id
)
SELECT d.id FROM deleted d
