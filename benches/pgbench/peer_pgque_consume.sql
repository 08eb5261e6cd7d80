-- fleet_consume.sql for pgque (only with PGQUE_SQL, see benches/queue_fleet.sh):
-- each client is a cooperative subconsumer of consumer 'bench'; it takes the
-- next batch (the events between two ticks, however many), works 1 ms per
-- event and finishes the batch, counting its events in public.pgque_done in
-- the same transaction; it looks again after 5 ms when no batch is ready.
SELECT coalesce(batch_id, 0) AS batch
  FROM pgque.next_batch_custom('bench', 'bench', 'sub_' || :client_id, '0 ms', 1, '0 ms') \gset
\if :batch
SELECT count(*) AS n FROM pgque.get_batch_events(:batch) \gset
\sleep :n ms
WITH counted AS (UPDATE public.pgque_done SET n = n + :n WHERE client = :client_id)
SELECT pgque.finish_batch(:batch);
\else
\sleep 5 ms
\endif
