DELETE FROM distlock.lease_state WHERE name = $1 RETURNING expires_at > $2
