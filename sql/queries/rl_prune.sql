-- params: none
-- Expired state behaves exactly like no state, so it can go.
WITH windows AS (
    DELETE FROM distlock.rate_limit_windows
     WHERE window_end OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() RETURNING 1
)
DELETE FROM distlock.rate_limit_gcra WHERE tat OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp()
