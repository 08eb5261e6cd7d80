INSERT INTO distlock.rate_limit_gcra (key, tat) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING
