-- The same loop in lease mode: released by the token of the previous claim.
-- Run with -D held=0 -D token=0.
\if :held > 0
SELECT coalesce(task_id, 0) AS held, coalesce(fencing_token, 0) AS token
  FROM distlock.release_and_fetch_task(:held, :token, 'completed', 'bench', '30 seconds') \gset
\else
SELECT coalesce(task_id, 0) AS held, coalesce(fencing_token, 0) AS token
  FROM distlock.worker_fetch_and_execute_task('bench', '30 seconds') \gset
\endif
