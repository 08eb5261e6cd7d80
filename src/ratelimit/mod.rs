//! Rate limiting: a fixed-window counter (`check_rate_limit`) and GCRA with
//! redis-cell's CL.THROTTLE semantics (`throttle`). State lives in shared
//! memory when pg_distlock is preloaded (no WAL, no row lock per check),
//! otherwise in tables (exact, durable, replicated). No session-level lock
//! is taken on either path, so nothing can leak on error.
//!
//! These functions do not pin search_path: pinning costs about a
//! microsecond per call, as much as a whole shared-memory check, and the
//! statements of the table path (sql/queries/rl_*.sql) qualify every table,
//! function and operator instead.

mod admin;
mod logic;
mod memory;
pub(crate) mod placement;
mod table;
#[cfg(any(test, feature = "pg_test"))]
mod placement_tests;
#[cfg(any(test, feature = "pg_test"))]
mod ratelimit_tests;

pub use table::prune_expired;

use crate::scopes::{require, Capability};
use crate::text::{self, Text};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise, required};
use logic::{Gcra, Window};
use memory::Kind;

const MICROS_PER_SECOND: i64 = 1_000_000;

fn now_us() -> i64 {
    unsafe { pgrx::pg_sys::GetCurrentTimestamp() }
}

fn positive(value: Option<i32>, argument: &str) -> i32 {
    let n = required(value, argument);
    if n <= 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{argument} must be positive, got {n}"),
        );
    }
    n
}

fn to_timestamp(us: i64) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(us).unwrap_or_else(|_| TimestampWithTimeZone::positive_infinity())
}

/// Milliseconds, rounded up so that waiting that long is always enough; -1 stays -1.
fn ceil_ms(us: i64) -> i64 {
    if us < 0 {
        -1
    } else {
        (us + 999) / 1000
    }
}

/// Longest a key's state may last (31 days): the shared-memory slot of a key
/// is not reused before its state expires, so one call with a huge window or
/// period could otherwise pin a slot until the server restarts.
const MAX_STATE_SECONDS: f64 = 31.0 * 86_400.0;

fn refuse_long_state(what: String) -> ! {
    crate::errors::raise_with_hint(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        what,
        "A rate limit's state may last at most 31 days; use a shorter period.",
    )
}

/// True for at most `p_max_requests` calls per key per window of
/// `p_window_seconds`; a window opens at the first call after the previous
/// one ended.
#[pg_extern]
fn check_rate_limit(p_key: Option<Text>, p_max_requests: Option<i32>, p_window_seconds: Option<i32>) -> bool {
    let key = &text::name(p_key, "p_key");
    require(Capability::Worker, "rate-limit key", key);
    let max_requests = positive(p_max_requests, "p_max_requests");
    let window_seconds = positive(p_window_seconds, "p_window_seconds");
    if window_seconds as f64 > MAX_STATE_SECONDS {
        refuse_long_state(format!("p_window_seconds must be at most 2678400 (31 days), got {window_seconds}"));
    }
    let length_us = window_seconds as i64 * MICROS_PER_SECOND;
    let now = now_us();
    let in_memory = memory::with_entry(Kind::Window, key, now, |entry, existing| {
        let current = existing.then(|| memory::window_of(entry));
        let (allowed, next) = logic::admit(current, now, max_requests, length_us);
        if let Some(window) = next {
            memory::store_window(entry, window);
        }
        allowed
    });
    in_memory.unwrap_or_else(|| table::admit(key, now, length_us, max_requests))
}

/// GCRA rate limiting with the semantics of redis-cell's CL.THROTTLE:
/// `p_max_burst + 1` requests at once, refilled at `p_count_per_period` per
/// `p_period_seconds`. `p_quantity` 0 peeks without consuming.
#[pg_extern]
fn throttle(
    p_key: Option<Text>,
    p_max_burst: Option<i32>,
    p_count_per_period: Option<i32>,
    p_period_seconds: Option<f64>,
    p_quantity: default!(Option<i32>, 1),
) -> TableIterator<
    'static,
    (
        name!(allowed, bool),
        name!(limit, i32),
        name!(remaining, i32),
        name!(retry_after_ms, i64),
        name!(reset_after_ms, i64),
    ),
> {
    let key = &text::name(p_key, "p_key");
    require(Capability::Worker, "rate-limit key", key);
    let max_burst = required(p_max_burst, "p_max_burst");
    if max_burst < 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("p_max_burst must not be negative, got {max_burst}"),
        );
    }
    let count_per_period = positive(p_count_per_period, "p_count_per_period");
    let period_seconds = required(p_period_seconds, "p_period_seconds");
    if !(period_seconds.is_finite() && period_seconds > 0.0 && period_seconds < 1e9) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("p_period_seconds must be a positive number of seconds, got {period_seconds}"),
        );
    }
    // The state lasts until its theoretical arrival time, at most a full
    // burst's worth of emission intervals ahead.
    let state_seconds = (max_burst as f64 + 1.0) * period_seconds / count_per_period as f64;
    if state_seconds > MAX_STATE_SECONDS {
        refuse_long_state(format!(
            "(p_max_burst + 1) * p_period_seconds / p_count_per_period must be at most 2678400 (31 days), got {state_seconds}"
        ));
    }
    let quantity = required(p_quantity, "p_quantity");
    if quantity < 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("p_quantity must not be negative, got {quantity}"),
        );
    }
    let gcra = Gcra { max_burst, count_per_period, period_us: (period_seconds * 1e6).round() as i64 };
    let now = now_us();
    let in_memory = memory::with_entry(Kind::Gcra, key, now, |entry, existing| {
        let verdict = gcra.throttle(existing.then_some(entry.tat_us), now, quantity);
        if let Some(tat) = verdict.new_tat_us {
            entry.tat_us = tat;
            entry.expires_at_us = tat;
        }
        verdict
    });
    let v = in_memory.unwrap_or_else(|| table::throttle(key, now, &gcra, quantity));
    TableIterator::once((v.allowed, v.limit, v.remaining, ceil_ms(v.retry_after_us), ceil_ms(v.reset_after_us)))
}

/// The current fixed window of `p_key`: requests counted, the limit, and
/// its bounds. No row when the key has no open window.
#[pg_extern]
fn rate_limit_status(
    p_key: Option<Text>,
) -> TableIterator<
    'static,
    (
        name!(request_count, i32),
        name!(max_requests, i32),
        name!(window_start, TimestampWithTimeZone),
        name!(window_end, TimestampWithTimeZone),
    ),
> {
    let key = &text::name(p_key, "p_key");
    require(Capability::Worker, "rate-limit key", key);
    let now = now_us();
    let window: Option<Window> = if crate::shared::available() {
        memory::peek(Kind::Window, key, now).map(|e| memory::window_of(&e))
    } else {
        table::window(key, now)
    };
    TableIterator::new(window.into_iter().map(|w| {
        (w.count, w.max_requests, to_timestamp(w.start_us), to_timestamp(w.end_us()))
    }))
}

/// Forgets all rate-limit state of `p_key` (windows and GCRA); true if it had any.
#[pg_extern]
fn reset_rate_limit(p_key: Option<Text>) -> bool {
    let key = &text::name(p_key, "p_key");
    let now = now_us();
    if crate::shared::available() {
        let window = memory::forget(Kind::Window, key, now);
        let gcra = memory::forget(Kind::Gcra, key, now);
        window || gcra
    } else {
        table::reset(key, now)
    }
}
