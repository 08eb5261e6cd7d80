SELECT EXISTS (SELECT 1 FROM distlock.lease_state WHERE name = $1 AND token = $2 AND expires_at > $3)
