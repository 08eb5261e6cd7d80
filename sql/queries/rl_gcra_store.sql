UPDATE distlock.rate_limit_gcra SET tat = $2 WHERE key = $1
