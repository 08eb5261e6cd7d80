SELECT * FROM distlock.queue_stats;
