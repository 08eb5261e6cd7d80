-- pgque's ticker for benches/queue_fleet.sh (pgque.start() would run it
-- from pg_cron): a tick every 50 ms at most, as the queue's settings allow.
SELECT pgque.ticker();
\sleep 50 ms
