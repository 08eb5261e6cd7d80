SELECT EXISTS (
    SELECT 1 FROM distlock.task_lock_holders h WHERE h.task_id = $1 AND h.pid = $2)
