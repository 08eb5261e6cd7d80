-- pg_distlock 0.1.0 -> 0.2.0, run by ALTER EXTENSION pg_distlock UPDATE.
-- Every schema change since 0.1.0 is here as well as in the install script
-- that sql/*.sql and src/ generate; tests/cluster/upgrade.rs checks that a
-- 0.1.0 database updated with this script equals a fresh 0.2.0 install
-- (tests/cluster/schema_fingerprint.sql) and keeps its data.
\echo Use "ALTER EXTENSION pg_distlock UPDATE TO '0.2.0'" to load this file. \quit
