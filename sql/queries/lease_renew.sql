UPDATE distlock.lease_state
   SET renewed_at = $3, expires_at = $3 + $4
 WHERE name = $1 AND owner = $2 AND expires_at > $3
RETURNING token
