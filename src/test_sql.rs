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
