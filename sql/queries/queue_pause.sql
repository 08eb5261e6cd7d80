-- params: text
-- Pauses queue $1; a row when it was running.
INSERT INTO distlock.queue_settings AS s (queue, paused, updated_at)
VALUES ($1, true, pg_catalog.now())
ON CONFLICT (queue) DO UPDATE
   SET paused = true, updated_at = excluded.updated_at
 WHERE NOT s.paused
RETURNING true
