SELECT distlock.check_rate_limit('hot', 1000000000, 3600);
