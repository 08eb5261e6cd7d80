-- fleet_consume.sql completing in place, as 0.2.0 did: the job's row stays
-- in distlock.task_queue as 'completed' (a new row version) instead of
-- moving to distlock.completed_jobs. The baseline of the archive's choice.
SELECT count(*) AS n, coalesce(array_agg(task_id), '{}') AS ids, coalesce(array_agg(attempts), '{}') AS att
  FROM distlock.consume_tasks(64, 'worker-' || :client_id, p_wait => :wait::interval) \gset
\sleep :n ms
UPDATE distlock.task_queue q
   SET status = 'completed', completed_at = clock_timestamp(), lease_expires_at = NULL
  FROM ROWS FROM (unnest(:ids::bigint[]), unnest(:att::int[])) AS j (id, attempt)
 WHERE q.id = j.id AND q.status = 'processing' AND q.worker_id = 'worker-' || :client_id AND q.attempts = j.attempt;
