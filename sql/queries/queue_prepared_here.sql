-- params: none
-- Whether this database has a prepared transaction: it may hold jobs (or
-- claims) that COMMIT or ROLLBACK PREPARED makes runnable in a session that
-- wakes nobody. Read before a waiting consumer's look, so that one ending
-- while the look runs (after the claim's snapshot, before queue_next_due)
-- still makes the consumer look again in a second.
SELECT EXISTS (SELECT FROM pg_catalog.pg_prepared_xacts p
                WHERE p.database OPERATOR(pg_catalog.=) pg_catalog.current_database())
