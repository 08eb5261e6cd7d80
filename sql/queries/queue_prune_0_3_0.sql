-- params: interval
-- queue_prune.sql for SQL older than 0.4.0, which has no distlock.job_attempts:
-- it has no attempts to delete.
-- Completed and dead jobs that finished more than $1 ago. Pending, failed
-- (waiting for a retry) and processing jobs are never deleted.
WITH archived AS (
    DELETE FROM distlock.completed_jobs
     WHERE completed_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) $1)
    RETURNING id
), finished AS (
    -- Completed here too: an old library completes in place until the update.
    DELETE FROM distlock.task_queue
     WHERE (status OPERATOR(pg_catalog.=) 'dead' OR status OPERATOR(pg_catalog.=) 'completed')
       AND completed_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) $1)
    RETURNING id
)
SELECT id FROM archived
UNION ALL
SELECT id FROM finished
