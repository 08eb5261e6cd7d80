-- params: text, timestamptz
UPDATE distlock.rate_limit_gcra SET tat = $2 WHERE key OPERATOR(pg_catalog.=) $1
