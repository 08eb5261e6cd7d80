\set id random(1, 1000)
SELECT distlock.try_acquire_task_lock(:id, 'bench') AS got \gset
\if :got
SELECT distlock.release_task_lock(:id, 'bench', 'completed');
\endif
