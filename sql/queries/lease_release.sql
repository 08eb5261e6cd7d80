-- Deletes owner $2's row of lease $1; true when it was still held at $3.
DELETE FROM distlock.lease_state WHERE name = $1 AND owner = $2 RETURNING expires_at > $3
