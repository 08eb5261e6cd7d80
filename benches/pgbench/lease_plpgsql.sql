\set n random(1, 1000)
SELECT recipe.acquire_lease('lease-' || :n, 'client-' || :client_id, '30 seconds');
SELECT recipe.release_lease('lease-' || :n, 'client-' || :client_id);
