-- params: integer
-- Whether any backend holds task $1's lock (either tag): a session-mode
-- claim runs it, or one is being made. From pg_locks, which is no
-- snapshot: what holds it now.
SELECT EXISTS (
    SELECT 1 FROM distlock.task_lock_holders h
     WHERE h.task_id OPERATOR(pg_catalog.=) $1)
