//! Shorthands shared by the #[pg_test] modules.

use pgrx::prelude::*;

/// The first column of a one-row query; the test fails on an SQL error.
pub fn one<T: FromDatum + IntoDatum>(sql: &str) -> Option<T> {
    Spi::get_one::<T>(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The first column of a one-row query, which must not be NULL.
pub fn required<T: FromDatum + IntoDatum>(sql: &str) -> T {
    one::<T>(sql).unwrap_or_else(|| panic!("{sql}: returned NULL"))
}

/// Queues a job with `distlock.enqueue_task(args)`; its id.
pub fn enqueue(args: &str) -> i64 {
    required(&format!("SELECT distlock.enqueue_task({args})"))
}

/// The wall clock, in seconds since the epoch.
pub fn clock_seconds() -> f64 {
    required("SELECT extract(epoch FROM clock_timestamp())::float8")
}

/// Runs statements; the test fails on an SQL error.
pub fn run(sql: &str) {
    Spi::run(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Fails unless `call` (an expression PERFORM can evaluate) raises SQLSTATE `state`.
pub fn assert_sqlstate(call: &str, state: &str) {
    run(&format!(
        "DO $test$ DECLARE got text; BEGIN
           BEGIN PERFORM {call}; EXCEPTION WHEN OTHERS THEN got := SQLSTATE; END;
           IF got IS DISTINCT FROM '{state}' THEN
             RAISE EXCEPTION '% raised %, expected {state}', $c${call}$c$, coalesce(got, 'nothing');
           END IF;
         END $test$"
    ));
}

/// Waits until no other test that plans claims or grows the queue by
/// thousands of rows runs, until the end of the transaction: the planner
/// scales the statistics by the table's current size, so a test's plans
/// change while another fills the table beside it (queue/plan_tests.rs).
pub fn queue_plans_to_myself() {
    run("SELECT pg_advisory_xact_lock(46, 46)");
}
