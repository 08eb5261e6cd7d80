//! Single-session tests of the lock calls; tests/cluster covers waiting,
//! timeouts, deadlocks and telemetry with several connections.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{assert_sqlstate, one, run};

    /// How many granted pg_locks rows this backend has for a bigint advisory key.
    fn my_holds(key_sql: &str) -> i64 {
        one::<i64>(&format!(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted \
               AND pid = pg_backend_pid() AND ((classid::bigint << 32) | objid::bigint) = {key_sql}"
        ))
        .expect("count")
    }

    /// The modes in which this backend holds a bigint advisory key.
    fn mode_of(key_sql: &str) -> Option<String> {
        one::<String>(&format!(
            "SELECT string_agg(mode, ',' ORDER BY mode) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 \
               AND pid = pg_backend_pid() AND ((classid::bigint << 32) | objid::bigint) = {key_sql}"
        ))
    }

    #[pg_test]
    fn locks_text_key_is_the_lock_id_advisory_lock() {
        assert_eq!(one::<bool>("SELECT distlock.lock('orders')"), Some(true));
        assert_eq!(
            mode_of("distlock.lock_id('orders')").as_deref(),
            Some("ExclusiveLock")
        );
        assert_eq!(one::<bool>("SELECT distlock.unlock('orders')"), Some(true));
        assert_eq!(my_holds("distlock.lock_id('orders')"), 0);
        assert_eq!(
            one::<bool>("SELECT distlock.unlock('orders')"),
            Some(false),
            "nothing held: false"
        );
    }

    #[pg_test]
    fn locks_are_reentrant_and_counted() {
        assert_eq!(
            one::<bool>("SELECT distlock.lock('r') AND distlock.try_lock('r')"),
            Some(true)
        );
        assert_eq!(one::<bool>("SELECT distlock.unlock('r')"), Some(true));
        assert_eq!(my_holds("distlock.lock_id('r')"), 1, "one hold left");
        assert_eq!(one::<bool>("SELECT distlock.unlock('r')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.unlock('r')"), Some(false));
    }

    #[pg_test]
    fn locks_shared_mode_is_a_share_lock() {
        assert_eq!(
            one::<bool>("SELECT distlock.lock('s', p_shared => true)"),
            Some(true)
        );
        assert_eq!(
            mode_of("distlock.lock_id('s')").as_deref(),
            Some("ShareLock")
        );
        assert_eq!(
            one::<bool>("SELECT distlock.unlock('s')"),
            Some(false),
            "no exclusive hold to drop"
        );
        assert_eq!(one::<bool>("SELECT distlock.unlock('s', true)"), Some(true));
    }

    #[pg_test]
    fn locks_transaction_level_hold_is_not_unlockable() {
        assert_eq!(
            one::<bool>("SELECT distlock.try_lock('x', p_xact => true)"),
            Some(true)
        );
        assert_eq!(one::<bool>("SELECT distlock.unlock('x')"), Some(false));
        assert_eq!(
            my_holds("distlock.lock_id('x')"),
            1,
            "held until the transaction ends"
        );
        assert_eq!(one::<i64>("SELECT distlock.unlock_all()"), Some(0));
    }

    #[pg_test]
    fn locks_bigint_key_is_pg_advisory_lock() {
        assert_eq!(one::<bool>("SELECT distlock.lock(424242)"), Some(true));
        assert_eq!(my_holds("424242"), 1);
        run("SELECT pg_advisory_lock(-5)");
        assert_eq!(
            one::<bool>("SELECT distlock.unlock(-5)"),
            Some(true),
            "one key space with pg_advisory_lock"
        );
        assert_eq!(
            one::<bool>("SELECT distlock.unlock(424242::bigint)"),
            Some(true)
        );
        assert_eq!(
            one::<bool>("SELECT distlock.lock(7, '0 s')"),
            Some(true),
            "a zero timeout is a try"
        );
        assert_eq!(
            one::<bool>("SELECT distlock.lock(8, '1 s')"),
            Some(true),
            "free: no wait"
        );
    }

    #[pg_test]
    fn locks_unlock_all_gives_back_only_its_own_session_holds() {
        run(
            "SELECT distlock.lock('a'), distlock.lock('a'), distlock.lock('b', p_shared => true), \
                    distlock.lock(99), pg_advisory_lock(100)",
        );
        assert_eq!(one::<i64>("SELECT distlock.unlock_all()"), Some(4));
        assert_eq!(
            my_holds("distlock.lock_id('a')") + my_holds("distlock.lock_id('b')") + my_holds("99"),
            0
        );
        assert_eq!(my_holds("100"), 1, "a plain pg_advisory_lock is left alone");
        assert_eq!(one::<i64>("SELECT distlock.unlock_all()"), Some(0));
    }

    #[pg_test]
    fn locks_unlock_all_survives_locks_dropped_behind_its_back() {
        run("SELECT distlock.lock('gone'), pg_advisory_unlock_all()");
        assert_eq!(one::<i64>("SELECT distlock.unlock_all()"), Some(0));
        assert_eq!(one::<bool>("SELECT distlock.unlock('gone')"), Some(false));
    }

    #[pg_test]
    fn locks_names_are_remembered_once_and_collisions_reported() {
        run("SELECT distlock.lock('orders-42'), distlock.unlock('orders-42'), distlock.try_lock('orders-42')");
        assert_eq!(
            one::<i64>("SELECT count(*) FROM distlock.lock_names WHERE name = 'orders-42' AND lock_id = distlock.lock_id('orders-42')"),
            Some(1)
        );
        assert_eq!(
            one::<String>("SELECT key_name FROM distlock.advisory_locks WHERE key = distlock.lock_id('orders-42')").as_deref(),
            Some("orders-42")
        );
        assert_eq!(
            one::<i64>("SELECT count(*) FROM distlock.lock_key_collisions"),
            Some(0)
        );
        // 64-bit md5 prefixes practically never collide, so plant a second name.
        run("INSERT INTO distlock.lock_names (lock_id, name) VALUES (distlock.lock_id('orders-42'), 'impostor')");
        assert_eq!(
            one::<Vec<String>>("SELECT names FROM distlock.lock_key_collisions WHERE lock_id = distlock.lock_id('orders-42')"),
            Some(vec!["impostor".to_string(), "orders-42".to_string()])
        );
        // The bigint overload has no name to remember.
        run("SELECT distlock.lock(31337)");
        assert_eq!(
            one::<i64>("SELECT count(*) FROM distlock.lock_names WHERE lock_id = 31337"),
            Some(0)
        );
    }

    #[pg_test]
    fn locks_names_are_not_written_in_a_read_only_transaction() {
        run("SET LOCAL transaction_read_only = on");
        assert_eq!(
            one::<bool>("SELECT distlock.lock('read-only-key')"),
            Some(true)
        );
        assert_eq!(
            one::<i64>("SELECT count(*) FROM distlock.lock_names WHERE name = 'read-only-key'"),
            Some(0)
        );
    }

    #[pg_test]
    fn locks_bad_inputs_raise_clear_errors() {
        assert_sqlstate("distlock.lock(NULL::text)", "22004");
        assert_sqlstate("distlock.lock(NULL::bigint)", "22004");
        assert_sqlstate("distlock.lock('')", "22023");
        assert_sqlstate("distlock.lock('k', '-1 second')", "22023");
        assert_sqlstate("distlock.lock(1::bigint, '-1 second')", "22023");
        assert_sqlstate("distlock.lock('k', NULL, NULL)", "22004");
        assert_sqlstate("distlock.lock('k', NULL, false, NULL)", "22004");
        assert_sqlstate("distlock.try_lock(NULL::text)", "22004");
        assert_sqlstate("distlock.try_lock('')", "22023");
        assert_sqlstate("distlock.try_lock('k', NULL)", "22004");
        assert_sqlstate("distlock.unlock(NULL::text)", "22004");
        assert_sqlstate("distlock.unlock(NULL::bigint)", "22004");
        assert_sqlstate("distlock.unlock('')", "22023");
        assert_sqlstate("distlock.unlock('k', NULL)", "22004");
        assert_eq!(
            my_holds("distlock.lock_id('k')"),
            0,
            "nothing taken by a refused call"
        );
    }

    #[pg_test]
    fn locks_telemetry_needs_preload() {
        // The pgrx test server does not preload pg_distlock.
        assert_sqlstate("distlock.reset_lock_stats()", "55000");
        assert_sqlstate("(SELECT count(*) FROM distlock.lock_stats)", "55000");
    }

    #[pg_test]
    fn locks_prune_lock_names_keeps_names_of_held_keys_and_recent_ones() {
        assert_eq!(one::<bool>("SELECT distlock.try_lock('held-name')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.try_lock('free-name')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.unlock('free-name')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.try_lock('recent-name')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.unlock('recent-name')"), Some(true));
        run("UPDATE distlock.lock_names SET first_seen = now() - interval '31 days' WHERE name <> 'recent-name'");
        assert_eq!(one::<i64>("SELECT distlock.prune_lock_names()"), Some(1), "default retention is 30 days");
        assert_eq!(
            one::<String>("SELECT string_agg(name, ',' ORDER BY name) FROM distlock.lock_names"),
            Some("held-name,recent-name".into())
        );
        assert_eq!(one::<bool>("SELECT distlock.unlock('held-name')"), Some(true));
    }

    /// One session stops at distlock.max_locks_per_session (lock keys and
    /// session task claims together) before it can fill the shared lock
    /// table; keys it already holds can be taken again.
    #[pg_test]
    fn locks_a_session_stops_at_its_lock_cap() {
        run("SET distlock.max_locks_per_session = 3");
        assert_eq!(
            one::<bool>("SELECT distlock.lock(1::bigint) AND distlock.lock(2::bigint) AND distlock.lock(3::bigint, p_xact => true)"),
            Some(true)
        );
        assert_sqlstate("distlock.lock(4::bigint)", "53400");
        assert_sqlstate("distlock.try_lock('four')", "53400");
        assert_eq!(my_holds("4"), 0, "nothing taken by the refused call");
        assert_eq!(one::<bool>("SELECT distlock.lock(2::bigint)"), Some(true), "a held key takes no new lock");
        // Task claims count too.
        run("INSERT INTO distlock.scheduled_tasks (id, task_name, task_type) VALUES (901, 'capped-a', 'x'), (902, 'capped-b', 'x')");
        assert_eq!(one::<i64>("SELECT distlock.unlock_all()"), Some(3));
        assert_eq!(one::<bool>("SELECT distlock.try_acquire_task_lock(901, 'w')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.lock(1::bigint)"), Some(true));
        assert_sqlstate("distlock.try_acquire_task_lock(902, 'w')", "53400");
        assert_eq!(
            one::<i64>("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND objid = 902"),
            Some(0),
            "the refused claim gave its task lock back"
        );
        run("SET distlock.max_locks_per_session = 0");
        assert_eq!(one::<bool>("SELECT distlock.try_acquire_task_lock(902, 'w')"), Some(true), "0 means no cap");
    }
}
