DELETE FROM distlock.semaphore_holders WHERE name = $1 AND expires_at <= $2
