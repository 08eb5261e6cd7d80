\set id random(1, 1000)
SELECT recipe.try_acquire_task_lock(:id, 'bench') AS got \gset
\if :got
SELECT recipe.release_task_lock(:id, 'bench', 'completed');
\endif
