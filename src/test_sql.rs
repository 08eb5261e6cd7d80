//! Shorthands shared by the #[pg_test] modules.

use pgrx::prelude::*;

/// The first column of a one-row query; the test fails on an SQL error.
pub fn one<T: FromDatum + IntoDatum>(sql: &str) -> Option<T> {
    Spi::get_one::<T>(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
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
