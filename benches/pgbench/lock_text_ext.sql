\set k random(1, 10000)
SELECT distlock.lock('key-' || :k);
SELECT distlock.unlock('key-' || :k);
