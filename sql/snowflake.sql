-- Per snowflake worker id: a millisecond (since 1970-01-01 UTC) that no
-- future ID's timestamp will be at or below. Table mode writes the last
-- issued millisecond once per transaction; memory mode reserves a block of
-- time ahead. After a restart, generation resumes above this mark, so a
-- clock that went back across the restart cannot repeat IDs.
CREATE TABLE distlock.id_generator (
    worker_id  int PRIMARY KEY,
    last_ms    bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT id_generator_worker_id_range CHECK (worker_id BETWEEN 0 AND 1023)
);

COMMENT ON TABLE distlock.id_generator IS
    'High-water marks of distlock.generate_snowflake_id, per worker id.';
