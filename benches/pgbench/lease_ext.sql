\set n random(1, 1000)
SELECT distlock.acquire_lease('lease-' || :n, 'client-' || :client_id, '30 seconds');
SELECT distlock.release_lease('lease-' || :n, 'client-' || :client_id);
