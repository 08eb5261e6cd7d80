-- params: text[]
-- The running queues with a concurrency limit, among $1 (NULL: all of them).
SELECT queue, max_processing
  FROM distlock.queue_settings
 WHERE max_processing IS NOT NULL
   AND NOT paused
   AND ($1 IS NULL OR queue OPERATOR(pg_catalog.=) ANY ($1))
