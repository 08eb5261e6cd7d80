SELECT count(*) FILTER (WHERE distlock.check_rate_limit('hot', 1000000000, 3600)) FROM generate_series(1, 100) g;
