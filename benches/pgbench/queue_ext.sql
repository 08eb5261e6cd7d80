SELECT task_id AS job, attempts AS attempt FROM distlock.consume_task('worker-' || :client_id) \gset
SELECT distlock.complete_task(:job, 'worker-' || :client_id, :attempt);
