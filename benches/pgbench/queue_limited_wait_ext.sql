-- queue_any_ext.sql for a consumer that waits in the server (p_wait) when
-- the queue is full or empty.
SELECT coalesce(max(task_id), 0) AS job, coalesce(max(attempts), 0) AS attempt
  FROM distlock.consume_task('worker-' || :client_id, p_wait => '1 second', p_queues => ARRAY['default']) \gset
SELECT count(*) FROM distlock.complete_tasks(ARRAY[:job]::bigint[], 'worker-' || :client_id, ARRAY[:attempt]::int[]);
