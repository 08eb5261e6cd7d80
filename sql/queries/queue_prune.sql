-- params: interval
-- Completed and dead jobs that finished more than $1 ago, and their
-- attempts. Pending, failed (waiting for a retry) and processing jobs are
-- never deleted.
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
), deleted AS (
    SELECT id FROM archived
    UNION ALL
    SELECT id FROM finished
), forgotten AS (
    DELETE FROM distlock.job_attempts a
     USING deleted d
     WHERE a.job_id OPERATOR(pg_catalog.=) d.id
)
SELECT d.id FROM deleted d
