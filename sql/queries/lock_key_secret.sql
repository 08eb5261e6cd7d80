-- params: none
-- This database's secret for pg_distlock's name-derived lock keys.
SELECT s.secret FROM distlock.lock_key_secret s
