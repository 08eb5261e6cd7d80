-- params: text[]
-- The semaphores $1 locked by sem_idle_lock.sql, re-checked on a new
-- snapshot: a holder that committed before the lock was taken keeps its row.
DELETE FROM distlock.semaphore_state s
 WHERE s.name OPERATOR(pg_catalog.=) ANY ($1)
   AND NOT EXISTS (SELECT 1 FROM distlock.semaphore_holders h WHERE h.name OPERATOR(pg_catalog.=) s.name)
