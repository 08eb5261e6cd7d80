SELECT name, paused, max_processing, pending, processing, failed, dead, completed_last_hour, oldest_pending_age FROM distlock.queues ORDER BY name;
