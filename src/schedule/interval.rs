//! Interval schedules: `every N seconds` and `every N minutes` (N from 1 to
//! 59), for what a five-field cron cannot say (pg_cron's `'30 seconds'`).
//!
//! Their slots are the whole multiples of N seconds (or minutes) since
//! 1970-01-01 00:00:00 UTC: measured from the slot, not from the end of the
//! run, so a run's length never shifts the ones after it, and every worker
//! and every call of cron_next agrees on them without a stored anchor. They
//! measure elapsed time: a time zone (and its daylight saving) does not move
//! them. `every 15 minutes` lands on :00, :15, :30 and :45 of the wall clock
//! in every zone whose offset is a whole number of quarter hours (all of
//! today's).

use pgrx::PgSqlErrorCode;

use crate::errors::raise;

/// The period in seconds of `expression` when it is an interval schedule;
/// None when it is not one (a cron, left to croner). `every ...` that is
/// not a valid interval is 22023, naming it.
pub fn period_seconds(expression: &str) -> Option<i64> {
    let mut words = expression.split_whitespace();
    if !words.next().is_some_and(|first| first.eq_ignore_ascii_case("every")) {
        return None;
    }
    let refuse = || -> ! {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!(
                "invalid schedule \"{expression}\": an interval schedule is 'every N seconds' or \
                 'every N minutes' with N from 1 to 59"
            ),
        )
    };
    let (Some(count), Some(unit), None) = (words.next(), words.next(), words.next()) else { refuse() };
    // Digits as written: "every 05 seconds" and "every +5 seconds" are
    // refused, as croner refuses such spellings of a field.
    if count.is_empty() || count.starts_with('0') || !count.bytes().all(|b| b.is_ascii_digit()) {
        refuse()
    }
    let count: i64 = count.parse().unwrap_or(0);
    if !(1..=59).contains(&count) {
        refuse()
    }
    let seconds = match unit.to_ascii_lowercase().as_str() {
        "second" | "seconds" => 1,
        "minute" | "minutes" => 60,
        _ => refuse(),
    };
    Some(count * seconds)
}

/// The first slot of a period of `period` seconds strictly after
/// `after_unix_micros`, in Unix microseconds.
pub fn next_after(period: i64, after_unix_micros: i64) -> Option<i64> {
    let period_micros = period.checked_mul(1_000_000)?;
    after_unix_micros.div_euclid(period_micros).checked_add(1)?.checked_mul(period_micros)
}
