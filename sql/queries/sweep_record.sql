-- params: integer
-- The sweep ran now and recovered $1 claims. A sweep running beside another
-- leaves the record to it rather than wait for its commit (concurrent sweeps
-- never wait for each other).
UPDATE distlock.sweep_state s
   SET last_run_at = pg_catalog.clock_timestamp(),
       last_recovered = $1,
       runs = s.runs OPERATOR(pg_catalog.+) 1,
       recovered = s.recovered OPERATOR(pg_catalog.+) $1
  FROM (SELECT t.id FROM distlock.sweep_state t FOR UPDATE SKIP LOCKED) free
 WHERE s.id OPERATOR(pg_catalog.=) free.id
