-- params: integer
-- Table mode: takes worker $1's row lock for the rest of the transaction,
-- serialising generators of that worker id.
SELECT last_ms FROM distlock.id_generator WHERE worker_id OPERATOR(pg_catalog.=) $1 FOR UPDATE
