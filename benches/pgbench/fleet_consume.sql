-- A fleet consumer: claims up to 64 jobs (waiting up to :wait for the
-- first; 0 for none), works 1 ms per job, completes them in one call.
SELECT count(*) AS n, coalesce(array_agg(task_id), '{}') AS ids, coalesce(array_agg(attempts), '{}') AS att
  FROM distlock.consume_tasks(64, 'worker-' || :client_id, p_wait => :wait::interval) \gset
\sleep :n ms
SELECT count(*) FROM distlock.complete_tasks(:ids::bigint[], 'worker-' || :client_id, :att::int[]);
