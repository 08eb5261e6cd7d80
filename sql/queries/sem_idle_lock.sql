-- params: none
-- Semaphores without holders, locked so no acquirer can add one before the
-- delete (acquirers lock the same row first, see sem_lock.sql); busy ones
-- are skipped.
SELECT s.name
  FROM distlock.semaphore_state s
 WHERE NOT EXISTS (SELECT 1 FROM distlock.semaphore_holders h WHERE h.name OPERATOR(pg_catalog.=) s.name)
   FOR UPDATE SKIP LOCKED
