WITH next AS (
    SELECT id FROM recipe.task_queue
     WHERE status IN ('pending', 'failed') AND run_after <= now()
     ORDER BY priority DESC, run_after, id
     LIMIT 1
       FOR UPDATE SKIP LOCKED)
UPDATE recipe.task_queue q
   SET status = 'processing', worker_id = 'worker-' || :client_id, started_at = now(),
       lease_expires_at = now() + interval '5 minutes', attempts = q.attempts + 1
  FROM next WHERE q.id = next.id
RETURNING q.id AS job \gset
UPDATE recipe.task_queue
   SET status = 'completed', completed_at = now(), lease_expires_at = NULL
 WHERE id = :job AND status = 'processing' AND worker_id = 'worker-' || :client_id;
