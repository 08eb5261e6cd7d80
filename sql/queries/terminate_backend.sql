-- params: integer
-- Waits up to 5 s for the backend to exit, so its locks are gone on return.
SELECT pg_catalog.pg_terminate_backend($1, 5000)
