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

-- Drawn once: each backend reads the secret once, so a changed secret would
-- leave older backends taking other locks than newer ones for the same name
-- (two grants of a name at once, a limited queue over its limit).
CREATE FUNCTION distlock.refuse_lock_key_secret_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'distlock.lock_key_secret is drawn once, at install, and never changes'
        USING ERRCODE = '55000',
              HINT = 'Backends keep the secret they read; to draw a new one, drop and create the extension.';
END
$$;
REVOKE ALL ON FUNCTION distlock.refuse_lock_key_secret_change() FROM PUBLIC;
CREATE TRIGGER drawn_once BEFORE UPDATE OR DELETE OR TRUNCATE ON distlock.lock_key_secret
    FOR EACH STATEMENT EXECUTE FUNCTION distlock.refuse_lock_key_secret_change();
