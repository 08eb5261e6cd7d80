\set k random(1, 10000)
SELECT pg_advisory_lock(hashtext('key-' || :k));
SELECT pg_advisory_unlock(hashtext('key-' || :k));
