//! Rate limiter tests in this backend's mode: table mode under
//! `cargo pgrx test` (not preloaded); tests/cluster runs memory mode and
//! concurrency.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn check(key: &str, max: i32, window: i32) -> bool {
        Spi::get_one::<bool>(&format!("SELECT distlock.check_rate_limit('{key}', {max}, {window})"))
            .expect("query")
            .expect("not null")
    }

    fn throttle(args: &str) -> (bool, i32, i32, i64, i64) {
        let row = Spi::connect(|c| {
            let rows = c.select(&format!("SELECT * FROM distlock.throttle({args})"), None, &[])?;
            let r = rows.first();
            Ok::<_, pgrx::spi::SpiError>((
                r.get::<bool>(1)?.expect("allowed"),
                r.get::<i32>(2)?.expect("limit"),
                r.get::<i32>(3)?.expect("remaining"),
                r.get::<i64>(4)?.expect("retry"),
                r.get::<i64>(5)?.expect("reset"),
            ))
        });
        row.expect("throttle")
    }

    #[pg_test]
    fn ratelimit_fixed_window_allows_exactly_max() {
        let results: Vec<bool> = (0..5).map(|_| check("api:alice", 3, 60)).collect();
        assert_eq!(results, vec![true, true, true, false, false]);
        assert!(check("api:bob", 3, 60), "keys are independent");
        let status = Spi::get_two::<i32, i32>(
            "SELECT request_count, max_requests FROM distlock.rate_limit_status('api:alice') \
             WHERE window_end - window_start = interval '60 seconds'",
        )
        .expect("status");
        assert_eq!(status, (Some(3), Some(3)));
    }

    #[pg_test]
    fn ratelimit_a_new_window_opens_after_the_old_one_ends() {
        assert!(check("k", 2, 1));
        assert!(check("k", 2, 1));
        assert!(!check("k", 2, 1));
        Spi::run("SELECT pg_sleep(1.05)").expect("let the window end");
        assert!(check("k", 2, 1));
        assert_eq!(
            Spi::get_one::<i32>("SELECT request_count FROM distlock.rate_limit_status('k')").expect("status"),
            Some(1)
        );
    }

    #[pg_test]
    fn ratelimit_reset_forgets_the_key() {
        assert!(check("k", 1, 60));
        assert!(!check("k", 1, 60));
        assert_eq!(Spi::get_one::<bool>("SELECT distlock.reset_rate_limit('k')").expect("reset"), Some(true));
        assert_eq!(Spi::get_one::<bool>("SELECT distlock.reset_rate_limit('k')").expect("reset"), Some(false));
        assert!(check("k", 1, 60));
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM distlock.rate_limit_status('never-used')").expect("status"),
            Some(0)
        );
    }

    /// A state that would outlive 31 days would pin its shared-memory slot.
    #[pg_test]
    fn ratelimit_state_lasting_more_than_31_days_is_refused_with_22023() {
        for call in [
            "distlock.throttle('pin', 2147483647, 1, 999999999, 2147483647)",
            "distlock.throttle('pin', 0, 1, 2678401)",
            "distlock.check_rate_limit('pin', 1, 2678401)",
        ] {
            Spi::run(&format!(
                "DO $$ BEGIN PERFORM {call}; RAISE EXCEPTION 'accepted %', $c${call}$c$; \
                 EXCEPTION WHEN invalid_parameter_value THEN RETURN; END $$"
            ))
            .unwrap_or_else(|e| panic!("{call}: {e}"));
        }
        assert!(check("day-long", 1, 2_678_400), "31 days exactly is allowed");
        assert!(throttle("'day-long', 30, 1, 86400").0);
    }

    #[pg_test]
    fn ratelimit_throttle_matches_redis_cell() {
        // CL.THROTTLE user123 15 30 60 1 -> 0 16 15 -1 2
        assert_eq!(throttle("'user123', 15, 30, 60"), (true, 16, 15, -1, 2000));
        assert_eq!(throttle("'user123', 15, 30, 60").2, 14);
    }

    #[pg_test]
    fn ratelimit_throttle_denies_past_the_burst_and_peeks_with_zero() {
        // 3 at once, then one per second.
        assert_eq!(throttle("'k', 2, 1, 1").0, true);
        assert_eq!(throttle("'k', 2, 1, 1").0, true);
        let third = throttle("'k', 2, 1, 1");
        assert_eq!((third.0, third.2), (true, 0));
        let denied = throttle("'k', 2, 1, 1");
        assert!(!denied.0);
        assert_eq!(denied.1, 3);
        assert!(denied.3 > 900 && denied.3 <= 1000, "retry after about a second: {denied:?}");
        let peek = throttle("'k', 2, 1, 1, 0");
        assert!(!peek.0 || peek.2 == 0, "a peek consumes nothing: {peek:?}");
        let fresh_peek = throttle("'other', 2, 1, 1, 0");
        assert_eq!((fresh_peek.0, fresh_peek.2), (true, 3));
        assert_eq!(throttle("'other', 2, 1, 1, 0").2, 3, "peeking twice still leaves the full burst");
        let too_big = throttle("'other', 2, 1, 1, 4");
        assert_eq!((too_big.0, too_big.3), (false, -1), "more than the limit can never pass");
    }

    #[pg_test(error = "p_key must not be NULL")]
    fn ratelimit_null_key() {
        Spi::run("SELECT distlock.check_rate_limit(NULL, 1, 1)").expect("call");
    }

    #[pg_test(error = "p_key must not be blank, got \"\"")]
    fn ratelimit_empty_key() {
        Spi::run("SELECT distlock.check_rate_limit('', 1, 1)").expect("call");
    }

    #[pg_test(error = "p_max_requests must be positive, got 0")]
    fn ratelimit_zero_max() {
        Spi::run("SELECT distlock.check_rate_limit('k', 0, 1)").expect("call");
    }

    #[pg_test(error = "p_window_seconds must be positive, got -1")]
    fn ratelimit_negative_window() {
        Spi::run("SELECT distlock.check_rate_limit('k', 1, -1)").expect("call");
    }

    #[pg_test(error = "p_window_seconds must not be NULL")]
    fn ratelimit_null_window() {
        Spi::run("SELECT distlock.check_rate_limit('k', 1, NULL)").expect("call");
    }

    #[pg_test(error = "p_max_burst must not be negative, got -1")]
    fn ratelimit_negative_burst() {
        Spi::run("SELECT * FROM distlock.throttle('k', -1, 1, 1)").expect("call");
    }

    #[pg_test(error = "p_period_seconds must be a positive number of seconds, got NaN")]
    fn ratelimit_nan_period() {
        Spi::run("SELECT * FROM distlock.throttle('k', 1, 1, 'NaN')").expect("call");
    }

    #[pg_test(error = "p_quantity must not be negative, got -2")]
    fn ratelimit_negative_quantity() {
        Spi::run("SELECT * FROM distlock.throttle('k', 1, 1, 1, -2)").expect("call");
    }

    #[pg_test(error = "p_count_per_period must be positive, got 0")]
    fn ratelimit_zero_count() {
        Spi::run("SELECT * FROM distlock.throttle('k', 1, 0, 1)").expect("call");
    }
}
