SELECT tat FROM distlock.rate_limit_gcra WHERE key = $1 FOR UPDATE
