//! Schedules in named time zones: the wall clock decides which times match,
//! PostgreSQL's own time zone data which instant a time names, and the two
//! rules for transitions (a repeated time runs at its first occurrence, a
//! skipped one at the end of the gap).

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{assert_sqlstate, required, run};

    /// cron_next in `zone` after `after`, shown in UTC.
    fn next_utc(expr: &str, after: &str, zone: &str) -> String {
        required::<String>(&format!(
            "SELECT to_char(distlock.cron_next('{expr}', '{after}'::timestamptz, '{zone}') AT TIME ZONE 'UTC', \
             'YYYY-MM-DD HH24:MI:SS')"
        ))
    }

    const ZONES: [&str; 6] =
        ["America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "Asia/Kolkata", "Pacific/Chatham", "UTC"];

    /// For every day of 2026 and times of day around every transition of these
    /// zones, a daily schedule runs at the instant PostgreSQL's conversion
    /// gives: the earliest instant whose local time (instant AT TIME ZONE,
    /// which is never ambiguous) has reached the slot's. That is the slot's
    /// instant when it exists once, its first occurrence when it exists twice,
    /// and the end of the gap when it does not exist.
    #[pg_test]
    fn zone_daily_slots_agree_with_postgresql_over_a_year() {
        for zone in ZONES {
            for time in ["00:00", "01:30", "02:00", "02:15", "02:30", "02:45", "03:00", "03:30", "12:00", "23:45"] {
                let (hour, minute) = time.split_once(':').expect("HH:MM");
                let disagreements = required::<i64>(&format!(
                    "WITH days AS (
                         SELECT d::date AS day FROM generate_series(date '2026-01-01', date '2026-12-31', interval '1 day') d
                     ), slots AS (
                         SELECT day, (day OPERATOR(pg_catalog.+) time '{time}') AS wall,
                                -- late on the local day before (no zone has a transition then)
                                (((day OPERATOR(pg_catalog.-) 1) OPERATOR(pg_catalog.+) time '23:50') AT TIME ZONE '{zone}') AS after
                           FROM days
                     ), compared AS (
                         SELECT s.day,
                                distlock.cron_next('{minute} {hour} * * *', s.after, '{zone}') AS ours,
                                (SELECT min(c) FROM generate_series((s.wall AT TIME ZONE '{zone}') - interval '3 hours',
                                                                    (s.wall AT TIME ZONE '{zone}') + interval '3 hours',
                                                                    interval '15 minutes') c
                                  WHERE (c AT TIME ZONE '{zone}') >= s.wall) AS expected
                           FROM slots s
                     )
                     SELECT count(*) FROM compared
                      WHERE ours IS DISTINCT FROM expected"
                ));
                assert_eq!(disagreements, 0, "{zone} at {time}");
            }
        }
    }

    /// Every quarter hour of 2026, the next quarter-hour slot's wall clock is
    /// the one PostgreSQL shows for the instant chosen, and no instant is
    /// chosen twice in a row (time moves on).
    #[pg_test]
    fn zone_quarter_hours_show_their_wall_clock() {
        for zone in ZONES {
            let wrong = required::<i64>(&format!(
                "SELECT count(*) FROM (
                     SELECT t, distlock.cron_next('*/15 * * * *', t, '{zone}') AS n
                       FROM generate_series(timestamptz '2026-01-01 00:07:00+00', timestamptz '2026-12-31 23:07:00+00',
                                            interval '1 hour') t
                 ) x
                 WHERE n <= t
                    OR n > t + interval '2 hours'
                    OR pg_catalog.date_part('minute', n AT TIME ZONE '{zone}')::int % 15 <> 0"
            ));
            assert_eq!(wrong, 0, "{zone}");
        }
    }

    #[pg_test]
    fn zone_spring_forward_runs_a_skipped_time_at_the_end_of_the_gap_once() {
        // New York, 2026-03-08: 02:00 EST jumps to 03:00 EDT (07:00 UTC).
        let ny = "America/New_York";
        assert_eq!(next_utc("30 2 * * *", "2026-03-08 00:00:00-05", ny), "2026-03-08 07:00:00");
        assert_eq!(next_utc("30 2 * * *", "2026-03-08 07:00:05+00", ny), "2026-03-09 06:30:00");
        // Every slot in the gap and the one at its end run once, at 03:00 EDT.
        assert_eq!(next_utc("*/15 * * * *", "2026-03-08 01:50:00-05", ny), "2026-03-08 07:00:00");
        assert_eq!(next_utc("*/15 * * * *", "2026-03-08 07:00:01+00", ny), "2026-03-08 07:15:00");
        assert_eq!(next_utc("@hourly", "2026-03-08 01:10:00-05", ny), "2026-03-08 07:00:00");
        assert_eq!(next_utc("@hourly", "2026-03-08 07:00:01+00", ny), "2026-03-08 08:00:00");
    }

    #[pg_test]
    fn zone_fall_back_runs_a_repeated_time_once_at_its_first_occurrence() {
        // New York, 2026-11-01: 02:00 EDT falls back to 01:00 EST (06:00 UTC).
        let ny = "America/New_York";
        assert_eq!(next_utc("30 1 * * *", "2026-11-01 00:00:00-04", ny), "2026-11-01 05:30:00");
        assert_eq!(next_utc("30 1 * * *", "2026-11-01 05:30:05+00", ny), "2026-11-02 06:30:00");
        // The wall clock's hour 01 comes once: 01:00 EDT, then 02:00 EST.
        assert_eq!(next_utc("@hourly", "2026-11-01 00:30:00-04", ny), "2026-11-01 05:00:00");
        assert_eq!(next_utc("@hourly", "2026-11-01 05:00:05+00", ny), "2026-11-01 07:00:00");
        // Created during the repeated hour (01:20 EST): 01:30 occurred at
        // 01:30 EDT already, so the next slot is 02:00 EST.
        assert_eq!(next_utc("30 1 * * *", "2026-11-01 06:20:00+00", ny), "2026-11-02 06:30:00");
        assert_eq!(next_utc("*/30 * * * *", "2026-11-01 06:20:00+00", ny), "2026-11-01 07:00:00");
    }

    #[pg_test]
    fn zone_half_hour_and_quarter_hour_offsets() {
        // Kolkata is +05:30 all year.
        assert_eq!(next_utc("0 9 * * *", "2026-06-01 00:00:00+00", "Asia/Kolkata"), "2026-06-01 03:30:00");
        // Chatham is +12:45 in winter (June) and +13:45 in summer (January).
        assert_eq!(next_utc("0 9 * * *", "2026-06-01 00:00:00+00", "Pacific/Chatham"), "2026-06-01 20:15:00");
        assert_eq!(next_utc("0 9 * * *", "2026-01-10 00:00:00+00", "Pacific/Chatham"), "2026-01-10 19:15:00");
        // Lord Howe moves by 30 minutes: +10:30 in June, +11 in January.
        assert_eq!(next_utc("0 9 * * *", "2026-06-01 00:00:00+00", "Australia/Lord_Howe"), "2026-06-01 22:30:00");
        assert_eq!(next_utc("0 9 * * *", "2026-01-10 00:00:00+00", "Australia/Lord_Howe"), "2026-01-10 22:00:00");
    }

    #[pg_test]
    fn zone_the_session_time_zone_does_not_matter() {
        run("SET LOCAL TimeZone = 'Asia/Tokyo'");
        assert_eq!(next_utc("0 3 * * *", "2026-06-01 00:00:00+00", "Europe/Berlin"), "2026-06-01 01:00:00");
        run("SET LOCAL TimeZone = 'America/Los_Angeles'");
        assert_eq!(next_utc("0 3 * * *", "2026-06-01 00:00:00+00", "Europe/Berlin"), "2026-06-01 01:00:00");
    }

    #[pg_test]
    fn zone_names_are_those_postgresql_knows_case_insensitively() {
        assert_eq!(next_utc("0 3 * * *", "2026-06-01 00:00:00+00", "europe/berlin"), "2026-06-01 01:00:00");
        assert_eq!(next_utc("0 3 * * *", "2026-06-01 00:00:00+00", "Etc/UTC"), "2026-06-01 03:00:00");
    }

    #[pg_test]
    fn zone_unknown_names_are_refused_with_22023() {
        for bad in ["Mars/Olympus_Mons", "", "Europe/Berlin\u{e9}", "right/UTC", "../../etc/passwd"] {
            assert_sqlstate(
                &format!("distlock.cron_next('* * * * *', now(), '{bad}')"),
                "22023",
            );
        }
    }
}
