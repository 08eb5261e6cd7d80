-- params: integer, integer
SELECT EXISTS (
    SELECT 1 FROM distlock.task_lock_holders h
     WHERE h.task_id OPERATOR(pg_catalog.=) $1 AND h.pid OPERATOR(pg_catalog.=) $2)
