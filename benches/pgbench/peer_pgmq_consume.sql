-- fleet_consume.sql for pgmq (only with PGMQ_SQL, see benches/queue_fleet.sh):
-- reads up to 64 messages with a 30 s visibility timeout (pgmq's lease),
-- works 1 ms per message, and archives them in one call.
SELECT count(*) AS n, coalesce(array_agg(msg_id), '{}') AS ids FROM pgmq.read('bench', 30, 64) \gset
\sleep :n ms
SELECT count(*) FROM pgmq.archive('bench', :ids::bigint[]);
