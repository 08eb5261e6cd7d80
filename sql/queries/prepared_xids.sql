-- params: none
-- The transaction ids of this database's prepared transactions that may
-- have changed distlock.task_queue (they hold a lock on it: a prepared
-- transaction keeps its locks, across a restart too): their outcome,
-- whenever it comes, writes no runnable log entry. Read once per database
-- after the claim frontier's table is made (a start or a crash restart
-- empties it, while prepared transactions survive). Others' (another
-- database, a transaction that never touched the queue) do not matter.
SELECT p.transaction::pg_catalog.text::pg_catalog.int8
  FROM pg_catalog.pg_prepared_xacts p
 WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database()
   AND EXISTS (SELECT FROM pg_catalog.pg_locks l
                WHERE l.locktype OPERATOR(pg_catalog.=) 'relation'
                  AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
                                                         WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
                  AND l.relation OPERATOR(pg_catalog.=) 'distlock.task_queue'::pg_catalog.regclass
                  AND l.virtualtransaction OPERATOR(pg_catalog.=) ('-1/' OPERATOR(pg_catalog.||) p.transaction::pg_catalog.text))
