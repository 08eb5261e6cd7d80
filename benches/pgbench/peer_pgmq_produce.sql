-- fleet_produce.sql for pgmq (only with PGMQ_SQL, see benches/queue_fleet.sh):
-- keeps about 4,000 visible messages of ~256 bytes, sent in batches of 128.
SELECT count(*) AS ready FROM (SELECT FROM pgmq.q_bench WHERE vt <= clock_timestamp() LIMIT 4000) r \gset
\if :ready < 4000
SELECT count(*) FROM pgmq.send_batch('bench', ARRAY(SELECT jsonb_build_object('pad', repeat('x', 240)) FROM generate_series(1, 128)));
\else
\sleep 1 ms
\endif
