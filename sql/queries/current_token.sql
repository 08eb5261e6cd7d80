-- The token of the claim running task $1: a session claim's, or a
-- lease-mode claim's while its lease lasts.
SELECT current_token
  FROM distlock.scheduled_tasks
 WHERE id OPERATOR(pg_catalog.=) $1
   AND (lease_expires_at IS NULL OR lease_expires_at OPERATOR(pg_catalog.>) pg_catalog.clock_timestamp())
