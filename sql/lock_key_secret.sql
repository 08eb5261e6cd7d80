-- This database's secret for the hash that places pg_distlock's own locks
-- on names (the locks ordering lease and election grants, and the claim
-- turns of limited queues): with it unknown, nobody can choose a name whose
-- lock falls on another tenant's (0.3.0 used md5 bits anyone could match).
-- Drawn at install; readable by the owner alone. pg_dump leaves it out, so
-- a restored database draws its own.
CREATE TABLE distlock.lock_key_secret (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    secret   bytea NOT NULL CHECK (pg_catalog.length(secret) OPERATOR(pg_catalog.>=) 16)
);

INSERT INTO distlock.lock_key_secret (secret)
SELECT pg_catalog.sha256(pg_catalog.convert_to(
           pg_catalog.gen_random_uuid()::text OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid()::text, 'UTF8'));

COMMENT ON TABLE distlock.lock_key_secret IS
    'Secret keying the hash of pg_distlock''s own name-derived locks (owner only).';
