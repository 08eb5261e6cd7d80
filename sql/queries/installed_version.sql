-- params: none
-- The version recorded for pg_distlock in this database; no row when it is not installed.
SELECT extversion
  FROM pg_catalog.pg_extension
 WHERE extname OPERATOR(pg_catalog.=) 'pg_distlock'
