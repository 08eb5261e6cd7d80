-- Like sf_store_mark, but gives up instead of waiting when another
-- transaction is writing the row (its own reservation is on the way).
UPDATE distlock.id_generator
   SET last_ms = GREATEST(last_ms, $2), updated_at = pg_catalog.now()
 WHERE worker_id OPERATOR(pg_catalog.=) (SELECT worker_id FROM distlock.id_generator
                     WHERE worker_id OPERATOR(pg_catalog.=) $1 FOR UPDATE SKIP LOCKED)
RETURNING worker_id
