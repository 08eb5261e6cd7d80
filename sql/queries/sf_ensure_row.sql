-- params: integer
INSERT INTO distlock.id_generator (worker_id, last_ms) VALUES ($1, 0)
ON CONFLICT (worker_id) DO NOTHING
