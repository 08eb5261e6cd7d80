-- params: text, timestamptz, bigint, integer
-- Admits one request for key $1 at time $2 into a window of $3 microseconds
-- allowing $4 requests. The upsert locks the key's row, so concurrent calls
-- queue on it: exactly $4 of them get a row back per window.
INSERT INTO distlock.rate_limit_windows AS w
       (key, window_start, window_end, max_requests, request_count)
VALUES ($1, $2, $2 OPERATOR(pg_catalog.+) pg_catalog.make_interval(secs => $3 OPERATOR(pg_catalog./) 1e6), $4, 1)
ON CONFLICT (key) DO UPDATE
   SET window_start  = CASE WHEN w.window_end OPERATOR(pg_catalog.<=) $2 THEN $2 ELSE w.window_start END,
       window_end    = CASE WHEN w.window_end OPERATOR(pg_catalog.<=) $2 THEN excluded.window_end ELSE w.window_end END,
       request_count = CASE WHEN w.window_end OPERATOR(pg_catalog.<=) $2 THEN 1
                            ELSE w.request_count OPERATOR(pg_catalog.+) 1 END,
       max_requests  = $4
 WHERE w.window_end OPERATOR(pg_catalog.<=) $2 OR w.request_count OPERATOR(pg_catalog.<) $4
RETURNING request_count
