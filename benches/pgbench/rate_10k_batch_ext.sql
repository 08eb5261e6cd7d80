\set k random(0, 9900)
SELECT count(*) FILTER (WHERE distlock.check_rate_limit('key-' || (:k + g), 1000000000, 3600)) FROM generate_series(1, 100) g;
