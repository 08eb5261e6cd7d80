//! Single-session tests of leases, semaphores and elections; tests/cluster
//! runs them through PgBouncer with many clients.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{one, run};

    fn expire() {
        Spi::run("SELECT pg_sleep(1.05)").expect("let a 1-second lease expire");
    }

    /// A lease, slot or leadership longer than distlock.max_hold_ttl (a day
    /// unless set) is refused: a dead holder would keep the name that long.
    #[pg_test]
    fn coordination_a_ttl_above_max_hold_ttl_is_refused_with_22023() {
        for call in [
            "distlock.acquire_lease('long', 'a', '1 day 1 second')",
            "distlock.renew_lease('long', 'a', '292026 years')",
            "distlock.acquire_semaphore('long', 2, 'a', '2 days')",
            "distlock.try_become_leader('long', 'a', '1 day 1 second')",
            // Positive by PostgreSQL's 30-day months, 143 years on a calendar.
            "distlock.acquire_lease('long', 'a', '10000 years -3599999 days')",
        ] {
            run(&format!(
                "DO $$ BEGIN PERFORM {call}; RAISE EXCEPTION 'accepted %', $c${call}$c$; \
                 EXCEPTION WHEN invalid_parameter_value THEN RETURN; END $$"
            ));
        }
        assert!(one::<i64>("SELECT distlock.acquire_lease('day', 'a', '1 day')").is_some(), "a day exactly is allowed");
        run("SET LOCAL distlock.max_hold_ttl = '7d'");
        assert!(one::<i64>("SELECT distlock.acquire_lease('week', 'a', '7 days')").is_some(), "the setting raises the bound");
    }

    /// One limit for all holders: another p_max while slots are held is a
    /// 22023 (a caller could otherwise raise the limit for everyone); once
    /// no slot is held the next taker sets it.
    #[pg_test]
    fn coordination_a_semaphore_has_one_limit_while_its_slots_are_held() {
        assert_eq!(one::<bool>("SELECT distlock.acquire_semaphore('a-sem', 2, 'a', '1 hour')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.acquire_semaphore('a-sem', 2, 'b', '1 hour')"), Some(true));
        run("DO $$ BEGIN PERFORM distlock.acquire_semaphore('a-sem', 1000, 'c', '1 hour'); \
             RAISE EXCEPTION 'a third holder got in with its own limit'; \
             EXCEPTION WHEN invalid_parameter_value THEN RETURN; END $$");
        assert_eq!(one::<bool>("SELECT distlock.acquire_semaphore('a-sem', 2, 'c', '1 hour')"), Some(false), "full at 2");
        run("SELECT distlock.release_semaphore('a-sem', 'a'), distlock.release_semaphore('a-sem', 'b')");
        assert_eq!(one::<bool>("SELECT distlock.acquire_semaphore('a-sem', 1000, 'c', '1 hour')"), Some(true), "no slot held: a new limit");
        assert_eq!(one::<i32>("SELECT max_holders FROM distlock.semaphore_state WHERE name = 'a-sem'"), Some(1000));
    }

    #[pg_test]
    fn coordination_lease_owner_renewal_and_fencing() {
        let t1 = one::<i64>("SELECT distlock.acquire_lease('db-migration', 'a', '1 second')").expect("token");
        assert_eq!(one::<i64>("SELECT distlock.acquire_lease('db-migration', 'a', '1 second')"), Some(t1), "renewal keeps the token");
        assert_eq!(one::<i64>("SELECT distlock.acquire_lease('db-migration', 'b', '1 second')"), None, "held by a");
        assert_eq!(one::<bool>(&format!("SELECT distlock.check_lease_token('db-migration', {t1})")), Some(true));
        expire();
        let t2 = one::<i64>("SELECT distlock.acquire_lease('db-migration', 'b', '1 hour')").expect("b takes over");
        assert!(t2 > t1, "tokens increase: {t2} > {t1}");
        assert_eq!(one::<bool>(&format!("SELECT distlock.check_lease_token('db-migration', {t1})")), Some(false), "stale token refused");
        assert_eq!(one::<bool>(&format!("SELECT distlock.check_lease_token('db-migration', {t2})")), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.renew_lease('db-migration', 'a', '1 hour')"), Some(false));
        assert_eq!(one::<bool>("SELECT distlock.release_lease('db-migration', 'a')"), Some(false), "never releases b's lease");
        assert_eq!(one::<bool>("SELECT distlock.renew_lease('db-migration', 'b', '2 hours')"), Some(true));
        assert_eq!(
            one::<bool>("SELECT is_held AND owner = 'b' AND remaining > interval '119 minutes' FROM distlock.leases WHERE name = 'db-migration'"),
            Some(true)
        );
        assert_eq!(one::<bool>("SELECT distlock.release_lease('db-migration', 'b')"), Some(true));
        let t3 = one::<i64>("SELECT distlock.acquire_lease('db-migration', 'a', '1 hour')").expect("free again");
        assert!(t3 > t2, "a token is never reused after its row is deleted");
        assert_eq!(one::<bool>("SELECT distlock.force_release_lease('db-migration')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.force_release_lease('db-migration')"), Some(false));
    }

    #[pg_test]
    fn coordination_semaphore_admits_at_most_max() {
        assert_eq!(one::<bool>("SELECT distlock.acquire_semaphore('gpu', 2, 'a', '1 second')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.acquire_semaphore('gpu', 2, 'b', '1 hour')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.acquire_semaphore('gpu', 2, 'c', '1 hour')"), Some(false));
        assert_eq!(one::<bool>("SELECT distlock.acquire_semaphore('gpu', 2, 'b', '1 hour')"), Some(true), "a holder renews");
        expire();
        assert_eq!(one::<bool>("SELECT distlock.acquire_semaphore('gpu', 2, 'c', '1 hour')"), Some(true), "a's place expired");
        assert_eq!(one::<bool>("SELECT distlock.release_semaphore('gpu', 'b')"), Some(true));
        assert_eq!(one::<bool>("SELECT distlock.release_semaphore('gpu', 'b')"), Some(false));
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.leases WHERE name = 'gpu' AND is_held"), Some(1));
    }

    #[pg_test]
    fn coordination_election_terms_increase_with_each_new_leader() {
        let first = Spi::get_three::<bool, i64, String>("SELECT is_leader, term, leader FROM distlock.try_become_leader('scheduler', 'n1', '1 second')")
            .expect("campaign");
        assert_eq!((first.0, first.2.as_deref()), (Some(true), Some("n1")));
        let other = Spi::get_three::<bool, i64, String>("SELECT is_leader, term, leader FROM distlock.try_become_leader('scheduler', 'n2', '1 second')")
            .expect("campaign");
        assert_eq!(other, (Some(false), first.1, Some("n1".into())), "n2 sees n1 and its term");
        let renewed = one::<i64>("SELECT term FROM distlock.try_become_leader('scheduler', 'n1', '1 second')");
        assert_eq!(renewed, first.1, "renewal keeps the term");
        expire();
        let next = Spi::get_three::<bool, i64, String>("SELECT is_leader, term, leader FROM distlock.try_become_leader('scheduler', 'n2', '1 hour')")
            .expect("campaign");
        assert_eq!((next.0, next.2.as_deref()), (Some(true), Some("n2")));
        assert!(next.1 > first.1, "a new leader gets a higher term");
        assert_eq!(one::<bool>("SELECT distlock.resign_leader('scheduler', 'n1')"), Some(false));
        assert_eq!(one::<bool>("SELECT distlock.resign_leader('scheduler', 'n2')"), Some(true));
        let third = one::<i64>("SELECT term FROM distlock.try_become_leader('scheduler', 'n1', '1 hour')").expect("term");
        assert!(Some(third) > next.1);
        assert_eq!(one::<bool>("SELECT is_current AND leader = 'n1' FROM distlock.leaders WHERE group_name = 'scheduler'"), Some(true));
    }

    #[pg_test(error = "p_name must not be NULL")]
    fn coordination_null_name() {
        one::<i64>("SELECT distlock.acquire_lease(NULL, 'a', '1 minute')");
    }

    #[pg_test(error = "p_owner must not be blank, got \"\"")]
    fn coordination_empty_owner() {
        one::<i64>("SELECT distlock.acquire_lease('x', '', '1 minute')");
    }

    #[pg_test(error = "p_ttl must be positive, got 00:00:00")]
    fn coordination_zero_ttl() {
        one::<bool>("SELECT distlock.renew_lease('x', 'a', '0')");
    }

    #[pg_test(error = "p_ttl must be positive, got -00:00:01")]
    fn coordination_negative_ttl() {
        one::<bool>("SELECT is_leader FROM distlock.try_become_leader('g', 'n', '-1 second')");
    }

    #[pg_test(error = "p_max must be between 1 and 2147483647, got 0")]
    fn coordination_semaphore_max_zero() {
        one::<bool>("SELECT distlock.acquire_semaphore('x', 0, 'a', '1 minute')");
    }

    #[pg_test(error = "p_token must not be NULL")]
    fn coordination_null_token() {
        one::<bool>("SELECT distlock.check_lease_token('x', NULL)");
    }

    #[pg_test]
    fn coordination_prune_leases_deletes_long_expired_rows_and_idle_semaphores() {
        let first = one::<i64>("SELECT distlock.acquire_lease('old', 'a', '1 minute')").expect("token");
        one::<i64>("SELECT distlock.acquire_lease('live', 'a', '1 hour')");
        one::<bool>("SELECT is_leader FROM distlock.try_become_leader('old-group', 'n', '1 minute')");
        one::<bool>("SELECT distlock.acquire_semaphore('old-sem', 2, 'a', '1 minute')");
        one::<bool>("SELECT distlock.acquire_semaphore('live-sem', 2, 'a', '1 hour')");
        run("UPDATE distlock.lease_state SET expires_at = now() - interval '2 days' WHERE name = 'old'; \
             UPDATE distlock.leader_state SET expires_at = now() - interval '2 days' WHERE group_name = 'old-group'; \
             UPDATE distlock.semaphore_holders SET expires_at = now() - interval '2 days' WHERE name = 'old-sem'");
        // lease + leadership + semaphore slot + the semaphore left without holders
        assert_eq!(one::<i64>("SELECT distlock.prune_leases()"), Some(4), "default retention is 1 day");
        assert_eq!(
            one::<String>("SELECT string_agg(name, ',' ORDER BY name) FROM distlock.leases"),
            Some("live,live-sem".into())
        );
        assert_eq!(one::<i64>("SELECT count(*) FROM distlock.leader_state"), Some(0));
        assert_eq!(one::<String>("SELECT string_agg(name, ',') FROM distlock.semaphore_state"), Some("live-sem".into()));
        let next = one::<i64>("SELECT distlock.acquire_lease('old', 'b', '1 minute')").expect("token");
        assert!(next > first, "a pruned name's next token {next} is still above {first}");
        assert_eq!(one::<i64>("SELECT distlock.prune_leases('1 day')"), Some(0), "nothing expired long enough");
    }
}
