-- params: text, timestamptz
-- Forgets the rate-limit state of every key starting with $1 (every key
-- when NULL), table mode; counts the keys that had live state at $2.
WITH windows AS (
    DELETE FROM distlock.rate_limit_windows w
     WHERE $1::pg_catalog.text IS NULL OR pg_catalog.starts_with(w.key, $1)
    RETURNING w.window_end
), gcra AS (
    DELETE FROM distlock.rate_limit_gcra g
     WHERE $1::pg_catalog.text IS NULL OR pg_catalog.starts_with(g.key, $1)
    RETURNING g.tat
)
SELECT (SELECT pg_catalog.count(*) FROM windows WHERE windows.window_end OPERATOR(pg_catalog.>) $2)
       OPERATOR(pg_catalog.+)
       (SELECT pg_catalog.count(*) FROM gcra WHERE gcra.tat OPERATOR(pg_catalog.>) $2)
