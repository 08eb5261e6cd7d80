SELECT true FROM distlock.task_queue WHERE id = $1
