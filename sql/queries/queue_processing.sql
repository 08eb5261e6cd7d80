-- params: text
-- How many jobs of queue $1 are processing (expired leases included: they
-- count until taken over or made dead).
SELECT pg_catalog.count(*)
  FROM distlock.task_queue
 WHERE queue OPERATOR(pg_catalog.=) $1
   AND status OPERATOR(pg_catalog.=) 'processing'
