-- params: text, timestamptz
SELECT request_count, max_requests, window_start, window_end
  FROM distlock.rate_limit_windows
 WHERE key OPERATOR(pg_catalog.=) $1 AND window_end OPERATOR(pg_catalog.>) $2
