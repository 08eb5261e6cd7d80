-- params: integer, bigint, interval, integer, timestamptz
-- Extends the lease of task $1's current claim, token $2, to $3 from now.
-- No row when that claim is not the current one or its lease has run out.
-- Returns the new expiry and the role that claimed it (the caller checks
-- it, and its error undoes this). The claim's log row records the renewing
-- backend, $4 started at $5 (a worker that reconnected renews from another).
WITH renewed AS (
    SELECT pg_catalog.clock_timestamp() AS at
),
task AS (
    UPDATE distlock.scheduled_tasks t
       SET lease_expires_at = r.at OPERATOR(pg_catalog.+) $3
      FROM renewed r, distlock.task_execution_log l
     WHERE t.id OPERATOR(pg_catalog.=) $1
       AND t.current_token OPERATOR(pg_catalog.=) $2
       AND t.lease_expires_at OPERATOR(pg_catalog.>) r.at
       AND l.task_id OPERATOR(pg_catalog.=) t.id
       AND l.status OPERATOR(pg_catalog.=) 'running'
       AND l.fencing_token OPERATOR(pg_catalog.=) $2
    RETURNING t.lease_expires_at, l.holder_role, l.id AS log_id
),
seen AS (
    UPDATE distlock.task_execution_log l
       SET lease_backend_pid = $4,
           lease_backend_start = $5
      FROM task
     WHERE l.id OPERATOR(pg_catalog.=) task.log_id
       -- Written only when another backend renews.
       AND (l.lease_backend_pid IS NULL OR l.lease_backend_start IS NULL
            OR l.lease_backend_pid OPERATOR(pg_catalog.<>) $4
            OR l.lease_backend_start OPERATOR(pg_catalog.<>) $5)
)
SELECT lease_expires_at, holder_role FROM task
