SELECT last_ms FROM distlock.id_generator WHERE worker_id = $1
