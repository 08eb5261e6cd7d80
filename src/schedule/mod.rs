//! Schedules: standard 5-field cron expressions and the @hourly, @daily,
//! @weekly, @monthly and @yearly nicknames, evaluated by the croner crate on
//! the wall clock of a time zone (UTC unless one is named; zone.rs maps the
//! wall clock to instants), day-of-month and day-of-week combining with OR
//! as in Vixie cron; and `every N seconds` / `every N minutes` (interval.rs).

mod interval;
#[cfg(any(test, feature = "pg_test"))]
mod interval_tests;
mod zone;
#[cfg(any(test, feature = "pg_test"))]
mod zone_tests;

use chrono::{DateTime, Utc};
use croner::parser::{CronParser, Seconds, Year};
use croner::Cron;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::errors::raise;
use crate::text::Text;

/// Microseconds from the Unix epoch to PostgreSQL's (2000-01-01 UTC).
const PG_EPOCH_UNIX_MICROS: i64 = 946_684_800_000_000;

fn parse(expression: &str) -> Cron {
    let parser = CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build();
    parser.parse(expression).unwrap_or_else(|e| {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid cron expression \"{expression}\": {e}"),
        )
    })
}

pub use zone::is_known as is_known_zone;

/// 0001-01-01 00:00:00 UTC in PostgreSQL's microseconds: croner finds no
/// occurrence before year 1 and answers with that year's first instead.
const EARLIEST_PG_MICROS: i64 = -63_082_281_600_000_000;

fn to_chrono(ts: TimestampWithTimeZone) -> Option<DateTime<Utc>> {
    if ts.is_infinity() || ts.is_neg_infinity() || ts.into_inner() < EARLIEST_PG_MICROS {
        return None;
    }
    DateTime::<Utc>::from_timestamp_micros(ts.into_inner().checked_add(PG_EPOCH_UNIX_MICROS)?)
}

fn start_of(after: TimestampWithTimeZone) -> DateTime<Utc> {
    to_chrono(after).unwrap_or_else(|| {
        raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!("cron_next needs a finite timestamp from 0001-01-01 00:00:00+00 on, got {after}"),
        )
    })
}

/// croner's next match strictly after `start` (a wall clock read as UTC).
fn next_match(cron: &Cron, expression: &str, start: &DateTime<Utc>) -> DateTime<Utc> {
    cron.find_next_occurrence(start, false).unwrap_or_else(|e| {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("cron expression \"{expression}\" has no occurrence after {start}: {e}"),
        )
    })
}

fn to_timestamptz(unix_micros: i64, expression: &str) -> TimestampWithTimeZone {
    unix_micros
        .checked_sub(PG_EPOCH_UNIX_MICROS)
        .and_then(|micros| TimestampWithTimeZone::try_from(micros).ok())
        .unwrap_or_else(|| {
            raise(
                PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
                format!("next occurrence of cron expression \"{expression}\" is out of range"),
            )
        })
}

/// The first slot of an interval schedule of `period` seconds after `after`.
fn next_interval_slot(period: i64, after: TimestampWithTimeZone, expression: &str) -> TimestampWithTimeZone {
    let next = interval::next_after(period, start_of(after).timestamp_micros()).unwrap_or_else(|| {
        raise(
            PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
            format!("next occurrence of schedule \"{expression}\" is out of range"),
        )
    });
    to_timestamptz(next, expression)
}

/// The first occurrence of `expression` strictly after `after`, in UTC.
pub fn next_occurrence(expression: &str, after: TimestampWithTimeZone) -> TimestampWithTimeZone {
    if let Some(period) = interval::period_seconds(expression) {
        return next_interval_slot(period, after, expression);
    }
    let cron = parse(expression);
    let next = next_match(&cron, expression, &start_of(after));
    to_timestamptz(next.timestamp_micros(), expression)
}

/// Slots a search may pass over before it gives up: each is a slot of a
/// repeated (fall-back) hour whose first occurrence has passed, at most an
/// hour's worth of minutes in any zone.
const PASSED_SLOTS_MAX: usize = 10_000;

/// The first occurrence of `expression` strictly after `after` on the wall
/// clock of `zone`. The wall clock decides which times match (`0 3 * * *` is
/// 03:00 local every day, `@hourly` each local hour); a matching time is run
/// at the instant it names, with two rules for the times a transition makes
/// ambiguous:
/// - a time that occurs twice (fall back) runs once, at its first
///   occurrence; if that has passed, the slot is over and the next is looked
///   for (an hourly task runs at 01:00 EDT, then 02:00 EST, once per hour of
///   the wall clock);
/// - a time that does not occur (spring forward) runs at the first instant
///   after the gap, the transition; every slot in the gap maps there, and the
///   next search starts after the gap, so they run once between them.
pub fn next_occurrence_in_zone(expression: &str, after: TimestampWithTimeZone, zone_name: &str, what: &str)
    -> TimestampWithTimeZone {
    ZonedSchedule::new(expression, zone_name, what).next_after(after)
}

/// A schedule parsed once and its zone looked up once, for stepping through
/// many of its slots (src/tasks/missed.rs): parsing was most of a step.
pub struct ZonedSchedule<'a> {
    expression: &'a str,
    zone: zone::Zone<'a>,
    zone_name: &'a str,
    kind: Kind,
}

enum Kind {
    /// `every N seconds|minutes`: elapsed time, which the zone does not move.
    Interval(i64),
    Cron(Box<Cron>),
}

impl<'a> ZonedSchedule<'a> {
    /// ERROR 22023 for a bad expression or zone, as cron_next's.
    pub fn new(expression: &'a str, zone_name: &'a str, what: &str) -> ZonedSchedule<'a> {
        let zone = zone::Zone::named(zone_name, what);
        let kind = match interval::period_seconds(expression) {
            Some(period) => Kind::Interval(period),
            None => Kind::Cron(Box::new(parse(expression))),
        };
        ZonedSchedule { expression, zone, zone_name, kind }
    }

    /// Its first slot strictly after `after` (next_occurrence_in_zone).
    pub fn next_after(&self, after: TimestampWithTimeZone) -> TimestampWithTimeZone {
        match &self.kind {
            Kind::Interval(period) => next_interval_slot(*period, after, self.expression),
            Kind::Cron(cron) => self.next_cron(cron, after),
        }
    }

    fn next_cron(&self, cron: &Cron, after: TimestampWithTimeZone) -> TimestampWithTimeZone {
        let (expression, zone, zone_name) = (self.expression, &self.zone, self.zone_name);
        let start = start_of(after);
        let after_micros = start.timestamp_micros();
        let after_second = after_micros.div_euclid(1_000_000);
        let Some(mut wall) = start.checked_add_signed(chrono::Duration::seconds(zone.offset_at(after_second))) else {
            raise(
                PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
                format!("cron_next needs a start whose wall clock in time zone \"{zone_name}\" is in range, got {after}"),
            )
        };
        // croner finds nothing before year 1 and answers with year 1's first
        // match instead: a start whose wall clock is still in 1 BC (west of
        // Greenwich at the first instant of year 1) is out of range too
        // (review helper-80).
        if wall.timestamp_micros() < EARLIEST_PG_MICROS + PG_EPOCH_UNIX_MICROS {
            raise(
                PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
                format!(
                    "cron_next needs a start whose wall clock in time zone \"{zone_name}\" is from 0001-01-01 00:00:00 on, got {after}"
                ),
            );
        }
        for _ in 0..PASSED_SLOTS_MAX {
            let slot = next_match(cron, expression, &wall);
            let instant = match zone.resolve(slot.timestamp()) {
                zone::Local::Exact(instant) | zone::Local::Twice(instant, _) | zone::Local::Skipped(instant) => instant,
            };
            if instant.saturating_mul(1_000_000) > after_micros {
                return to_timestamptz(instant.saturating_mul(1_000_000), expression);
            }
            // The slot's only (or first) occurrence has passed: it was served.
            wall = slot;
        }
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("cron expression \"{expression}\" has no occurrence after {start} in time zone \"{zone_name}\""),
        )
    }
}

/// The first time after `p_after` that matches the cron expression `p_expr` (UTC).
/// Taken as the database's bytes, not `&str`: in a LATIN1 or EUC database a
/// non-ASCII character must be a 22023 like any other bad expression.
#[pg_extern(immutable, strict, parallel_safe)]
fn cron_next(
    p_expr: Text,
    p_after: default!(TimestampWithTimeZone, "now()"),
) -> TimestampWithTimeZone {
    next_occurrence(ascii_expression(&p_expr), p_after)
}

fn ascii_expression(p_expr: &Text) -> &str {
    std::str::from_utf8(p_expr.bytes()).ok().filter(|e| e.is_ascii()).unwrap_or_else(|| {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("invalid cron expression \"{}\": only ASCII characters are allowed", p_expr.shown()),
        )
    })
}

/// The first time after `p_after` that matches the cron expression `p_expr`
/// on the wall clock of time zone `p_timezone` (an IANA name such as
/// 'Europe/Berlin', or anything PostgreSQL's TimeZone setting accepts by
/// name), with the server's time zone data. IMMUTABLE as PostgreSQL's own
/// timezone(text, timestamptz) is: an update of the time zone data can
/// change its answers.
#[pg_extern(name = "cron_next", immutable, strict, parallel_safe)]
fn cron_next_in_zone(p_expr: Text, p_after: TimestampWithTimeZone, p_timezone: Text) -> TimestampWithTimeZone {
    let expression = ascii_expression(&p_expr);
    let Some(zone_name) = std::str::from_utf8(p_timezone.bytes()).ok().filter(|z| z.is_ascii()) else {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("time zone \"{}\" (p_timezone) is not recognized", p_timezone.shown()),
        )
    };
    next_occurrence_in_zone(expression, p_after, zone_name, "p_timezone")
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn next(expr: &str, after: &str) -> String {
        Spi::get_one::<String>(&format!(
            "SELECT to_char(distlock.cron_next('{expr}', '{after}'::timestamptz) AT TIME ZONE 'UTC', \
             'YYYY-MM-DD HH24:MI:SS')"
        ))
        .expect("query runs")
        .expect("not null")
    }

    #[pg_test]
    fn schedule_five_field_and_nicknames_in_utc() {
        let after = "2026-03-14 10:17:30+00";
        assert_eq!(next("*/15 * * * *", after), "2026-03-14 10:30:00");
        assert_eq!(next("0 3 * * *", after), "2026-03-15 03:00:00");
        assert_eq!(next("@hourly", after), "2026-03-14 11:00:00");
        assert_eq!(next("@daily", after), "2026-03-15 00:00:00");
        assert_eq!(next("@weekly", after), "2026-03-15 00:00:00"); // a Sunday
        assert_eq!(next("@monthly", after), "2026-04-01 00:00:00");
        assert_eq!(next("@yearly", after), "2027-01-01 00:00:00");
        assert_eq!(next("0 0 1 1 *", "2026-01-01 00:00:00+00"), "2027-01-01 00:00:00");
    }

    #[pg_test]
    fn schedule_timezone_of_the_session_does_not_matter() {
        Spi::run("SET LOCAL TimeZone = 'America/New_York'").expect("set");
        assert_eq!(next("0 3 * * *", "2026-03-14 10:17:30+00"), "2026-03-15 03:00:00");
    }

    #[pg_test(error = "cron_next needs a finite timestamp from 0001-01-01 00:00:00+00 on, got 4713-01-01 00:00:00+00 BC")]
    fn schedule_refuses_a_start_before_year_one() {
        Spi::run("SET LOCAL TimeZone = 'UTC'").expect("set");
        next("* * * * *", "4713-01-01 00:00:00+00 BC");
    }

    #[pg_test]
    fn schedule_the_first_minute_of_year_one_is_in_range() {
        assert_eq!(next("* * * * *", "0001-01-01 00:00:00+00"), "0001-01-01 00:01:00");
    }

    #[pg_test(error = "invalid cron expression \"61 * * * *\": Component error: Number out of bounds.")]
    fn schedule_rejects_out_of_range_fields() {
        next("61 * * * *", "2026-01-01 00:00:00+00");
    }

    #[pg_test]
    fn schedule_rejects_bad_expressions_with_22023() {
        for bad in ["", "* * * *", "0 * * * * *", "hello", "@every_minute"] {
            // The DO block fails the test with 'accepted' unless cron_next raises 22023.
            Spi::run(&format!(
                "DO $$ BEGIN PERFORM distlock.cron_next('{bad}', now()); \
                 RAISE EXCEPTION 'accepted %', '{bad}'; \
                 EXCEPTION WHEN invalid_parameter_value THEN RETURN; END $$"
            ))
            .unwrap_or_else(|e| panic!("{bad:?}: {e}"));
        }
    }
}
