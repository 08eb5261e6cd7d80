DELETE FROM distlock.semaphore_holders WHERE name = $1 AND owner = $2 RETURNING expires_at > $3
