//! Scheduled tasks: exclusive claims (session or lease mode), releases,
//! fetching due work, fencing and log pruning.

mod claim;
mod cycle;
mod fencing;
mod fetch;
mod held;
mod lease;
mod legacy;
mod missed;
mod next_wait;
mod prune;
mod release;
mod run_now;
#[cfg(any(test, feature = "pg_test"))]
mod run_now_tests;
#[cfg(any(test, feature = "pg_test"))]
mod task_tests;
#[cfg(any(test, feature = "pg_test"))]
mod zone_tests;

pub use held::released as forget_held_claim;
pub use release::finish_claim;

/// This backend's start time, which with its pid identifies the session
/// holding a claim even after the pid is reused.
pub fn backend_start() -> pgrx::datum::TimestampWithTimeZone {
    pgrx::datum::TimestampWithTimeZone::try_from(unsafe { pgrx::pg_sys::MyStartTimestamp })
        .unwrap_or_else(|_| pgrx::datum::TimestampWithTimeZone::negative_infinity())
}
