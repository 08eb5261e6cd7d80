UPDATE distlock.semaphore_holders SET expires_at = $3 + $4
 WHERE name = $1 AND owner = $2
RETURNING true
