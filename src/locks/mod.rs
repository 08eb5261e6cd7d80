//! Advisory lock calls with bounded waits: `distlock.lock`, `try_lock`,
//! `unlock`, `unlock_all`, the key -> name memory behind the views, and
//! per-key telemetry (`distlock.lock_stats`).

mod api;
mod holds;
#[cfg(any(test, feature = "pg_test"))]
mod lock_tests;
mod manager;
mod names;
mod owner_graph;
pub(crate) mod owner_names;
mod owner_wait;
mod owners;
pub(crate) use owners::owner_assigned;
pub(crate) mod stats;
