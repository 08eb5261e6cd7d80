-- One commit per job: settles the job the previous transaction claimed
-- (:job, :attempt; pgbench -D job=0 -D attempt=0 for the first, which is
-- refused) and claims the next.
SELECT task_id AS job, attempts AS attempt
  FROM distlock.settle_and_consume_tasks(1, 'worker-' || :client_id, ARRAY[:job]::bigint[], ARRAY[:attempt]::int[])
 WHERE outcome = 'claimed' \gset
