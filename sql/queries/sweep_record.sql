-- params: integer
-- The sweep ran now and recovered $1 claims.
INSERT INTO distlock.sweep_state AS s (id, last_run_at, last_recovered, runs)
VALUES (1, pg_catalog.clock_timestamp(), $1, 1)
ON CONFLICT (id) DO UPDATE
   SET last_run_at = EXCLUDED.last_run_at,
       last_recovered = EXCLUDED.last_recovered,
       runs = s.runs OPERATOR(pg_catalog.+) 1
