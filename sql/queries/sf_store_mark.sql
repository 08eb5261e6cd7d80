-- params: integer, bigint
INSERT INTO distlock.id_generator AS g (worker_id, last_ms) VALUES ($1, $2)
ON CONFLICT (worker_id) DO UPDATE
   SET last_ms = GREATEST(g.last_ms, excluded.last_ms), updated_at = pg_catalog.now()
