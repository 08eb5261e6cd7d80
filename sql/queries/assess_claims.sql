-- params: bigint[], integer
-- Liveness and age of the locked claims $1; $2 is the default timeout in minutes.
SELECT r.log_id,
       r.task_id,
       r.worker_id,
       r.holder_pid,
       r.holder_alive,
       r.running_for OPERATOR(pg_catalog.>) COALESCE(r.timeout, pg_catalog.make_interval(mins => $2)) AS overdue,
       COALESCE(r.timeout, pg_catalog.make_interval(mins => $2))::pg_catalog.text AS timeout,
       r.holder_pid IS NULL AS leased
  FROM distlock.running_tasks r
 WHERE r.log_id OPERATOR(pg_catalog.=) ANY ($1)
 ORDER BY r.log_id
