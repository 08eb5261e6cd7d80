\set k random(1, 10000)
SELECT distlock.check_rate_limit('key-' || :k, 1000000000, 3600);
