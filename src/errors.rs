//! The one way pg_distlock reports bad input: an ERROR with a SQLSTATE.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

/// Raises an ERROR with `code`; never returns.
pub fn raise(code: PgSqlErrorCode, message: impl Into<String>) -> ! {
    ErrorReport::new(code, message.into(), "pg_distlock").report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Raises an ERROR with `code` and a hint telling the user what to do.
pub fn raise_with_hint(code: PgSqlErrorCode, message: impl Into<String>, hint: &str) -> ! {
    ErrorReport::new(code, message.into(), "pg_distlock")
        .set_hint(hint)
        .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// The value of a non-nullable argument, or ERROR 22004 naming it.
pub fn required<T>(value: Option<T>, argument: &str) -> T {
    match value {
        Some(value) => value,
        None => raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            format!("{argument} must not be NULL"),
        ),
    }
}

/// Claims are refused on a standby: advisory locks are not replicated, so a
/// lock taken there would protect nothing.
pub fn require_primary(action: &str) {
    // Recovery never starts again in a running backend, so once this backend
    // has seen a primary it need not ask (a call into PostgreSQL on every
    // snowflake ID).
    static PRIMARY_SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if PRIMARY_SEEN.load(std::sync::atomic::Ordering::Relaxed) {
        return;
    }
    if !unsafe { pg_sys::RecoveryInProgress() } {
        PRIMARY_SEEN.store(true, std::sync::atomic::Ordering::Relaxed);
        return;
    }
    raise_with_hint(
        PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
        format!("pg_distlock cannot {action} on a standby server"),
        "Advisory locks are not replicated; connect workers to the primary.",
    );
}

/// An interval's length in microseconds as PostgreSQL compares intervals
/// (a month is 30 days, a day 24 hours).
pub fn interval_micros(value: &pgrx::datum::Interval) -> i128 {
    const MICROS_PER_DAY: i128 = 86_400_000_000;
    value.months() as i128 * 30 * MICROS_PER_DAY + value.days() as i128 * MICROS_PER_DAY + value.micros() as i128
}

/// A non-NULL interval longer than zero, or ERROR 22004 / 22023 naming it.
pub fn positive_interval(value: Option<pgrx::datum::Interval>, argument: &str) -> pgrx::datum::Interval {
    let interval = required(value, argument);
    if interval_micros(&interval) <= 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{argument} must be positive, got {interval}"),
        );
    }
    interval
}

/// A positive interval (see `positive_interval`) with no negative part: what
/// a mixed one spans depends on the timestamp it is added to, and
/// '10000 years -3599999 days', a positive day by PostgreSQL's 30-day
/// months, spans 143 years on a calendar.
pub fn forward_interval(value: Option<pgrx::datum::Interval>, argument: &str) -> pgrx::datum::Interval {
    let interval = positive_interval(value, argument);
    if interval.months() < 0 || interval.days() < 0 || interval.micros() < 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{argument} must have no negative part, got {interval}"),
        );
    }
    interval
}

/// A positive interval (see `forward_interval`) whose longest possible span
/// is at most `max_seconds` (the setting `setting`), or ERROR 22023 with
/// `hint`. A month spans 28 to 31 days, so it counts as 31.
pub fn capped_interval(
    value: Option<pgrx::datum::Interval>,
    argument: &str,
    max_seconds: i32,
    setting: &str,
    hint: &str,
) -> pgrx::datum::Interval {
    let interval = forward_interval(value, argument);
    if longest_micros(&interval) > max_seconds as i128 * 1_000_000 {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{argument} must be at most {setting} ({max_seconds} s), got {interval}"),
            hint,
        );
    }
    interval
}

/// The longest span of `interval` in microseconds: a month counts as 31
/// days (what it spans depends on the timestamp it is added to).
fn longest_micros(interval: &pgrx::datum::Interval) -> i128 {
    const MICROS_PER_DAY: i128 = 86_400_000_000;
    interval.months() as i128 * 31 * MICROS_PER_DAY + interval.days() as i128 * MICROS_PER_DAY + interval.micros() as i128
}

/// Raises 0A000 (`message`, `hint`) unless the transaction is READ
/// COMMITTED: what needs a snapshot per statement, seeing what committed
/// since the last one.
pub fn require_read_committed(message: &str, hint: &str) {
    if unsafe { pgrx::pg_sys::XactIsoLevel } >= pgrx::pg_sys::XACT_REPEATABLE_READ as i32 {
        raise_with_hint(PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED, message, hint);
    }
}

/// A non-NULL count within `range`, or ERROR 22004 / 22023 naming it.
pub fn int_in_range(value: Option<i32>, argument: &str, range: std::ops::RangeInclusive<i32>) -> i32 {
    let n = required(value, argument);
    if !range.contains(&n) {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{argument} must be between {} and {}, got {n}", range.start(), range.end()),
        );
    }
    n
}

/// Turns an SPI or datum-conversion failure into ERROR XX000. SQL errors
/// inside a statement already arrive as PostgreSQL ERRORs; what reaches here
/// is pgrx failing to run or read a statement, a bug in pg_distlock, so the
/// message says where it happened.
pub trait OrRaise<T> {
    fn or_raise(self) -> T;
}

impl<T, E: std::fmt::Display> OrRaise<T> for Result<T, E> {
    #[track_caller]
    fn or_raise(self) -> T {
        match self {
            Ok(value) => value,
            Err(e) => {
                let at = std::panic::Location::caller();
                raise(
                    PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                    format!("pg_distlock: SPI failed at {}:{}: {e}", at.file(), at.line()),
                )
            }
        }
    }
}

/// A non-NULL interval not below zero (a retention), or ERROR 22004 / 22023.
pub fn retention_interval(value: Option<pgrx::datum::Interval>, argument: &str) -> pgrx::datum::Interval {
    let interval = required(value, argument);
    if interval_micros(&interval) < 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{argument} must not be negative, got {interval}"),
        );
    }
    interval
}
