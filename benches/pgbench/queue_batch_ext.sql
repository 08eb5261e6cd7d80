SELECT array_agg(task_id) AS jobs FROM distlock.consume_tasks(100, 'worker-' || :client_id) \gset
SELECT count(*) FROM distlock.complete_tasks(:jobs::bigint[], 'worker-' || :client_id);
