SELECT queue, jobs, wait_p50, wait_p95, wait_p99, wait_max FROM distlock.queue_latency ORDER BY queue;
