-- fleet_produce.sql for pgque (only with PGQUE_SQL, see benches/queue_fleet.sh):
-- keeps about 4,000 events of ~256 bytes not yet handed out (sent after the
-- last tick a consumer took), sent in batches of 128.
SELECT pgque.seq_getval(q.queue_event_seq) - t.tick_event_seq AS ready
  FROM pgque.queue q
  JOIN pgque.consumer c ON c.co_name = 'bench'
  JOIN pgque.subscription s ON s.sub_queue = q.queue_id AND s.sub_consumer = c.co_id
  JOIN pgque.tick t ON t.tick_queue = q.queue_id AND t.tick_id = s.sub_last_tick
 WHERE q.queue_name = 'bench' \gset
\if :ready < 4000
SELECT pgque.send_batch('bench', 'default',
                        ARRAY(SELECT jsonb_build_object('pad', repeat('x', 240))::text FROM generate_series(1, 128)));
\else
\sleep 1 ms
\endif
