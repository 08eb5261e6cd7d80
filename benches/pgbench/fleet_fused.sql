-- fleet_consume.sql with one commit per batch: completes the previous
-- batch (:ids, :att; pgbench -D ids={} -D att={} for the first) and claims
-- the next in one call.
SELECT count(*) AS n, coalesce(array_agg(task_id), '{}') AS ids, coalesce(array_agg(attempts), '{}') AS att
  FROM distlock.settle_and_consume_tasks(64, 'worker-' || :client_id, :ids::bigint[], :att::int[], p_wait => :wait::interval)
 WHERE outcome = 'claimed' \gset
\sleep :n ms
