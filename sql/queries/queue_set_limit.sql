-- params: text, integer
-- Sets queue $1's concurrency limit to $2 (NULL: none).
INSERT INTO distlock.queue_settings AS s (queue, max_processing, updated_at)
VALUES ($1, $2, pg_catalog.now())
ON CONFLICT (queue) DO UPDATE
   SET max_processing = excluded.max_processing, updated_at = excluded.updated_at
