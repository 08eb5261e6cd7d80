SELECT * FROM distlock.task_stats;
