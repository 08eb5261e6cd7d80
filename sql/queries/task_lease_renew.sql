-- params: integer, bigint, interval, integer, timestamptz
-- Extends the lease of task $1's current claim, token $2, to $3 from now.
-- No row when that claim is not the current one or its lease has run out.
-- Returns the new expiry and the role that claimed it (the caller checks
-- it, and its error undoes this). The renewing backend, $4 started at $5,
-- becomes the claim's backend (a worker may renew from another connection).
WITH renewed AS (
    SELECT pg_catalog.clock_timestamp() AS at
)
UPDATE distlock.scheduled_tasks t
   SET lease_expires_at = r.at OPERATOR(pg_catalog.+) $3,
       lease_backend_pid = $4,
       lease_backend_start = $5
  FROM renewed r, distlock.task_execution_log l
 WHERE t.id OPERATOR(pg_catalog.=) $1
   AND t.current_token OPERATOR(pg_catalog.=) $2
   AND t.lease_expires_at OPERATOR(pg_catalog.>) r.at
   AND l.task_id OPERATOR(pg_catalog.=) t.id
   AND l.status OPERATOR(pg_catalog.=) 'running'
   AND l.fencing_token OPERATOR(pg_catalog.=) $2
RETURNING t.lease_expires_at, l.holder_role
