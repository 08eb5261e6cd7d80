SELECT true FROM distlock.scheduled_tasks WHERE id = $1
