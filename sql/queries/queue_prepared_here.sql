-- params: oid
-- Whether this database ($1) has a prepared transaction: it may hold jobs
-- (or claims) that COMMIT or ROLLBACK PREPARED makes runnable in a session
-- that wakes nobody. Read before a waiting consumer's look, so that one
-- ending while the look runs (after the claim's snapshot, before
-- queue_next_due) still makes the consumer look again in a second.
-- The function, not the view pg_prepared_xacts: the view joins pg_authid
-- and pg_database for names this test does not need, and every waiting
-- look runs it (a third of a woken consumer's extra work in 0.4.0 before).
SELECT EXISTS (SELECT FROM pg_catalog.pg_prepared_xact() p WHERE p.dbid OPERATOR(pg_catalog.=) $1)
