-- params: bigint
-- Up to $1 recorded names, read once by a new backend.
SELECT lock_id, name FROM distlock.lock_names LIMIT $1
