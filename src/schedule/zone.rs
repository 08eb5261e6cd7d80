//! Time zones of schedules: a wall-clock time of a named zone mapped to the
//! instant it names, with the server's own time zone data (`pg_tzset`,
//! `pg_localtime`, `pg_next_dst_boundary`), so that the scheduler and SQL's
//! `AT TIME ZONE` never read two different releases of the IANA database.
//!
//! A local time is one of three kinds: it names one instant, two (the hour
//! a fall-back transition repeats) or none (the hour a spring-forward
//! transition skips). The scheduler's rules for the last two are in
//! `next_in_zone`; this module only tells which kind a time is.

use std::ffi::CString;

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;

use crate::errors::raise;

/// A zone as PostgreSQL loaded it: cached for the backend's life by
/// `pg_tzset`, never freed, so the pointer stays valid; and its name.
pub struct Zone<'a> {
    tz: *const pg_sys::pg_tz,
    name: &'a str,
}

/// Seconds either side of a local time within which its zone's offsets are
/// looked for: more than any offset from UTC, and short enough that no
/// zone has two transitions in the window.
const WINDOW_SECONDS: i64 = 2 * 86_400;

/// The largest offset from UTC a schedule's zone may have: every real zone's
/// is within 15 hours, while a POSIX rule can say up to 167 hours, which
/// the window above could not resolve (review helper-80).
const MOST_OFFSET_SECONDS: i64 = 26 * 3_600;

/// What a local time (seconds of a wall clock counted as if it were UTC)
/// names in a zone.
#[derive(Debug, PartialEq, Eq)]
pub enum Local {
    /// One instant (Unix seconds).
    Exact(i64),
    /// Two instants, the first occurrence first: a fall-back transition
    /// repeats the wall clock's time.
    Twice(i64, i64),
    /// None: the time falls in a spring-forward gap; the instant is the
    /// transition itself, the first after the gap.
    Skipped(i64),
}

/// The zone named `name`, if the server's time zone data has it and it
/// counts time as timestamptz does (no leap seconds).
fn load(name: &std::ffi::CStr) -> Option<*const pg_sys::pg_tz> {
    if name.is_empty() {
        return None;
    }
    // SAFETY: a NUL-terminated string; pg_tzset returns NULL or a zone cached
    // in TopMemoryContext. Zones with leap seconds ("right/...") are refused
    // as PostgreSQL refuses them for TimeZone.
    let tz = unsafe { pg_sys::pg_tzset(name.as_ptr()) };
    (!tz.is_null() && unsafe { pg_sys::pg_tz_acceptable(tz) }).then_some(tz as *const pg_sys::pg_tz)
}

/// How far ahead `within_reach` looks at a zone's offsets: its rules repeat
/// yearly, so two years see each offset the rules give.
const OFFSETS_AHEAD_SECONDS: i64 = 2 * 366 * 86_400;

/// Whether every offset `tz` has from now over OFFSETS_AHEAD_SECONDS lies
/// within MOST_OFFSET_SECONDS (a POSIX rule may be +20 h in winter and +30 h
/// in summer: checking today's offset alone let it in, review helper-83).
fn within_reach(tz: *const pg_sys::pg_tz) -> bool {
    let now: pg_sys::pg_time_t =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let mut at = now;
    // A zone changes offset a few times a year; the bound only guards the loop.
    for _ in 0..64 {
        let (mut before, mut after): (std::ffi::c_long, std::ffi::c_long) = (0, 0);
        let (mut before_dst, mut after_dst) = (0, 0);
        let mut boundary: pg_sys::pg_time_t = 0;
        // SAFETY: a zone pg_tzset returned; pointers to locals.
        let found = unsafe {
            pg_sys::pg_next_dst_boundary(&at, &mut before, &mut before_dst, &mut boundary, &mut after, &mut after_dst, tz)
        };
        if found < 0 || (before as i64).abs() > MOST_OFFSET_SECONDS {
            return false;
        }
        if found == 0 || boundary > now + OFFSETS_AHEAD_SECONDS {
            return true;
        }
        if (after as i64).abs() > MOST_OFFSET_SECONDS {
            return false;
        }
        at = boundary;
    }
    true
}

/// Whether the server's time zone data has a usable zone `name`, every
/// offset of it within MOST_OFFSET_SECONDS.
pub fn is_known(name: &std::ffi::CStr) -> bool {
    load(name).is_some_and(within_reach)
}

impl<'a> Zone<'a> {
    /// The zone `name`, or a 22023 naming it. `what` says where the name came
    /// from (a task's schedule_timezone, the setting, an argument).
    pub fn named(name: &'a str, what: &str) -> Zone<'a> {
        let refuse = || -> ! {
            raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("time zone \"{name}\" ({what}) is not recognized"),
            )
        };
        // pg_tzset refuses names longer than TZ_STRLEN_MAX by returning NULL.
        let Ok(c_name) = CString::new(name) else { refuse() };
        match load(&c_name) {
            Some(tz) if within_reach(tz) => Zone { tz, name },
            Some(_) => raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("time zone \"{name}\" ({what}) has an offset of more than 26 hours from UTC"),
            ),
            None => refuse(),
        }
    }

    /// Fails unless `offset` is one a schedule's zone may have.
    fn checked(&self, offset: i64) -> i64 {
        if offset.abs() > MOST_OFFSET_SECONDS {
            raise(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("time zone \"{}\" is {offset} seconds from UTC, more than 26 hours", self.name),
            )
        }
        offset
    }

    /// Seconds east of UTC in effect at Unix second `instant`.
    pub fn offset_at(&self, instant: i64) -> i64 {
        let t: pg_sys::pg_time_t = instant;
        // SAFETY: the zone is valid (see Zone); pg_localtime returns NULL for
        // an instant its tables cannot express, or a pointer to a static
        // buffer, read at once.
        let tm = unsafe { pg_sys::pg_localtime(&t, self.tz) };
        if tm.is_null() {
            raise(
                PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
                format!("instant {instant} (Unix seconds) is out of the time zone's range"),
            )
        }
        self.checked(unsafe { (*tm).tm_gmtoff as i64 })
    }

    /// The offsets in effect from `from` to `to` (Unix seconds): the first
    /// one, then each transition as (its instant, the offset after it).
    fn offsets_between(&self, from: i64, to: i64) -> (i64, Vec<(i64, i64)>) {
        let mut transitions = Vec::new();
        let mut at: pg_sys::pg_time_t = from;
        let mut first = None;
        loop {
            let (mut before, mut after): (std::ffi::c_long, std::ffi::c_long) = (0, 0);
            let (mut before_dst, mut after_dst) = (0, 0);
            let mut boundary: pg_sys::pg_time_t = 0;
            // SAFETY: valid zone, pointers to locals.
            let found = unsafe {
                pg_sys::pg_next_dst_boundary(
                    &at, &mut before, &mut before_dst, &mut boundary, &mut after, &mut after_dst, self.tz,
                )
            };
            if found < 0 {
                raise(
                    PgSqlErrorCode::ERRCODE_DATETIME_FIELD_OVERFLOW,
                    format!("instant {at} (Unix seconds) is out of the time zone's range"),
                )
            }
            first.get_or_insert(self.checked(before as i64));
            if found == 0 || boundary > to {
                break;
            }
            transitions.push((boundary, self.checked(after as i64)));
            at = boundary;
        }
        (first.unwrap_or(0), transitions)
    }

    /// What local time `local` (wall-clock seconds counted as if in UTC)
    /// names in this zone.
    pub fn resolve(&self, local: i64) -> Local {
        let (first, transitions) = self.offsets_between(local - WINDOW_SECONDS, local + WINDOW_SECONDS);
        // Spans of constant offset: (start, end, offset), end exclusive.
        let mut spans = Vec::with_capacity(transitions.len() + 1);
        let mut start = i64::MIN;
        let mut offset = first;
        for &(at, after) in &transitions {
            spans.push((start, at, offset));
            start = at;
            offset = after;
        }
        spans.push((start, i64::MAX, offset));
        let mut instants: Vec<i64> = spans
            .iter()
            .map(|&(start, end, offset)| (local - offset, start, end))
            .filter(|&(instant, start, end)| instant >= start && instant < end)
            .map(|(instant, _, _)| instant)
            .collect();
        instants.sort_unstable();
        instants.dedup();
        match instants.as_slice() {
            [one] => Local::Exact(*one),
            [first, .., last] => Local::Twice(*first, *last),
            [] => {
                // In a gap: the transition whose wall clock jumps over it.
                let gap = spans.windows(2).find(|pair| {
                    let (_, at, before) = pair[0];
                    let (_, _, after) = pair[1];
                    local >= at + before && local < at + after
                });
                match gap {
                    Some(pair) => Local::Skipped(pair[0].1),
                    // Unreachable for any zone's data; keep a defined answer.
                    None => Local::Exact(local - first),
                }
            }
        }
    }
}
