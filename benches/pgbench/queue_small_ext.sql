-- One job through queue 'small': enqueue one, claim one of that queue, complete it.
SELECT distlock.enqueue_task('small-job', p_queue => 'small');
SELECT distlock.complete_task(task_id, worker_id, attempts) FROM distlock.consume_task('bench', p_queues => ARRAY['small']);
