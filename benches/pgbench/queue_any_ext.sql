-- queue_ext.sql for a consumer of queue 'default', which may hand out
-- nothing (a concurrency limit): complete_tasks ignores the 0 of an empty
-- claim. Count jobs by completed rows, not by transactions.
SELECT coalesce(max(task_id), 0) AS job, coalesce(max(attempts), 0) AS attempt
  FROM distlock.consume_task('worker-' || :client_id, p_queues => ARRAY['default']) \gset
SELECT count(*) FROM distlock.complete_tasks(ARRAY[:job]::bigint[], 'worker-' || :client_id, ARRAY[:attempt]::int[]);
