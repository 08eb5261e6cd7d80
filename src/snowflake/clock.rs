//! The wall clock in milliseconds, and bounded waits for it.

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::errors::raise;
use crate::gucs::SNOWFLAKE_MAX_CLOCK_BACKWARD_MS;

/// Milliseconds since 1970-01-01 UTC: the clock GetCurrentTimestamp reads
/// (CLOCK_REALTIME), read from Rust so that each ID does not pay pgrx's
/// guard around a call into PostgreSQL.
pub fn now_ms() -> i64 {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(since) => since.as_millis() as i64,
        // A clock before 1970 is far outside every epoch and raises in compose().
        Err(before) => -(before.duration().as_millis() as i64),
    }
}

/// Waits until the clock reaches `target_ms` and returns the time then.
/// A clock more than `distlock.snowflake_max_clock_backward` behind the
/// target is an error once that long has been waited.
pub fn wait_until(target_ms: i64, worker_id: i32) -> i64 {
    let started = now_ms();
    let limit = SNOWFLAKE_MAX_CLOCK_BACKWARD_MS.get() as i64;
    loop {
        let now = now_ms();
        if now >= target_ms {
            return now;
        }
        if now - started >= limit && target_ms - now > 1 {
            raise(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "clock moved backwards: snowflake worker id {worker_id} has issued IDs up to {target_ms} ms \
                     but the clock reads {now} ms after waiting {limit} ms (distlock.snowflake_max_clock_backward)"
                ),
            );
        }
        check_for_interrupts!();
        let wait_us = ((target_ms - now) * 1000).clamp(50, 10_000);
        unsafe { pgrx::pg_sys::pg_usleep(wait_us as _) };
    }
}
