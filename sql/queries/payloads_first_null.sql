-- params: jsonb[]
-- Where the first NULL element of $1 is (1-based), to name it in an error.
SELECT p.n
  FROM pg_catalog.unnest($1) WITH ORDINALITY AS p(payload, n)
 WHERE p.payload IS NULL
 ORDER BY p.n
 LIMIT 1
