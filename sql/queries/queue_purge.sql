-- params: text, boolean
-- Deletes the jobs of queue $1 that are pending, failed or dead, and with $2
-- those processing too. Rows a consumer is settling right now are skipped.
WITH purged AS (
    SELECT id
      FROM distlock.task_queue
     WHERE queue OPERATOR(pg_catalog.=) $1
       AND (status OPERATOR(pg_catalog.<>) 'processing' OR $2)
       FOR UPDATE SKIP LOCKED
)
DELETE FROM distlock.task_queue q
 USING purged
 WHERE q.id OPERATOR(pg_catalog.=) purged.id
RETURNING q.id
