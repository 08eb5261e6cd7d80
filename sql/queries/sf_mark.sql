-- params: integer
SELECT last_ms FROM distlock.id_generator WHERE worker_id OPERATOR(pg_catalog.=) $1
