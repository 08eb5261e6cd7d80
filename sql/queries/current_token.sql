SELECT current_token FROM distlock.scheduled_tasks WHERE id = $1
