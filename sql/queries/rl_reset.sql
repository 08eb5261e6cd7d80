-- params: text, timestamptz
-- Forgets key $1 in both tables; true when it had live state at time $2.
WITH windows AS (
    DELETE FROM distlock.rate_limit_windows WHERE key OPERATOR(pg_catalog.=) $1
    RETURNING window_end OPERATOR(pg_catalog.>) $2 AS live
), gcra AS (
    DELETE FROM distlock.rate_limit_gcra WHERE key OPERATOR(pg_catalog.=) $1
    RETURNING tat OPERATOR(pg_catalog.>) $2 AS live
)
SELECT COALESCE(pg_catalog.bool_or(live), false)
  FROM (SELECT live FROM windows UNION ALL SELECT live FROM gcra) AS deleted
