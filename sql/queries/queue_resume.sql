-- params: text
-- Resumes queue $1; a row when it was paused.
UPDATE distlock.queue_settings
   SET paused = false, updated_at = pg_catalog.now()
 WHERE queue OPERATOR(pg_catalog.=) $1
   AND paused
RETURNING true
