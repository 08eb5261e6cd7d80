-- params: text, timestamptz
-- How many jobs of queue $1 are processing, and how many of them have a
-- lease that ran out at or before $2, or none (they count until taken back).
SELECT pg_catalog.count(*),
       pg_catalog.count(*) FILTER (WHERE lease_expires_at OPERATOR(pg_catalog.<=) $2 OR lease_expires_at IS NULL)
  FROM distlock.task_queue
 WHERE queue OPERATOR(pg_catalog.=) $1
   AND status OPERATOR(pg_catalog.=) 'processing'
