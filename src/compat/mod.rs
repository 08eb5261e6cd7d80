//! C entry points that only an older release's SQL names, kept so that a
//! database still at that release keeps working with this library until
//! `ALTER EXTENSION pg_distlock UPDATE` runs (the install scripts of today
//! do not declare them). One module per release; a release's module goes
//! once no supported upgrade path starts from it.
//! `tests/cluster/upgrade.rs::the_library_exports_every_symbol_of_every_release`
//! checks that every symbol each frozen script binds is exported.

mod v0_1_0;
mod v0_2_0;
mod v0_3_0;
#[cfg(any(test, feature = "pg_test"))]
mod v0_3_0_tests;
