SELECT tat FROM distlock.rate_limit_gcra WHERE key OPERATOR(pg_catalog.=) $1 FOR UPDATE
