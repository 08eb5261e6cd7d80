-- params: text[]
-- The lock keys (distlock.lock_id) of the lock names that start with one of
-- the prefixes $1: what a scoped monitor may see of lock telemetry.
SELECT DISTINCT n.lock_id
  FROM distlock.lock_names n
 WHERE EXISTS (SELECT 1 FROM pg_catalog.unnest($1) p(prefix)
                WHERE pg_catalog.starts_with(n.name, p.prefix))
