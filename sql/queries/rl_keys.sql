-- params: timestamptz
-- The live rate-limit state of this database (table mode): kind, key,
-- request count and limit (fixed windows), and when the state ends.
SELECT 'window'::pg_catalog.text, w.key, w.request_count, w.max_requests, w.window_end
  FROM distlock.rate_limit_windows w
 WHERE w.window_end OPERATOR(pg_catalog.>) $1
UNION ALL
SELECT 'gcra'::pg_catalog.text, g.key, NULL::pg_catalog.int4, NULL::pg_catalog.int4, g.tat
  FROM distlock.rate_limit_gcra g
 WHERE g.tat OPERATOR(pg_catalog.>) $1
