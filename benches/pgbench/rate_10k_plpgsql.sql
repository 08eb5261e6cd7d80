\set k random(1, 10000)
SELECT recipe.check_rate_limit('key-' || :k, 1000000000, 3600);
