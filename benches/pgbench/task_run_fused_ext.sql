-- One commit per task run: each transaction releases the task this client
-- ran last (:held, 0 before the first claim) and claims the next due one.
-- Run with -D held=0.
\if :held > 0
SELECT coalesce(task_id, 0) AS held FROM distlock.release_and_fetch_task(:held, 'bench', 'completed') \gset
\else
SELECT coalesce(task_id, 0) AS held FROM distlock.worker_fetch_and_execute_task('bench') \gset
\endif
