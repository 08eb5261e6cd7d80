-- The fleet's producer: keeps about 4,000 jobs of ~256-byte payloads ready,
-- in batches of 128 (one enqueue_tasks call each).
SELECT count(*) AS ready FROM (SELECT FROM distlock.task_queue WHERE status = 'pending' LIMIT 4000) r \gset
\if :ready < 4000
SELECT count(*) FROM distlock.enqueue_tasks('job', ARRAY(SELECT pg_catalog.jsonb_build_object('pad', repeat('x', 240)) FROM generate_series(1, 128)));
\else
\sleep 1 ms
\endif
