-- The one-transaction recipe, measured for its dead row versions: claim up
-- to 64 jobs by their row locks alone (no claim update, no lease), work 1 ms
-- per job holding them, and complete them in the same transaction. A
-- rejected shape (docs/performance.md, "Finished jobs"), not an API.
BEGIN;
SELECT count(*) AS n, coalesce(array_agg(id), '{}') AS ids FROM (
  SELECT id FROM distlock.task_queue
   WHERE status = ANY (ARRAY['pending', 'failed']) AND run_after <= now()
   ORDER BY priority DESC, run_after, id LIMIT 64 FOR UPDATE SKIP LOCKED) s \gset
\sleep :n ms
UPDATE distlock.task_queue
   SET status = 'completed', completed_at = clock_timestamp(), started_at = now(), attempts = attempts + 1
 WHERE id = ANY (:ids::bigint[]);
COMMIT;
