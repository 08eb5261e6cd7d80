//! Review of the scheduler's time zones (issue 48, branch scheduler-zones):
//! breaks that need a real cluster. Each fails until it is fixed.

use crate::support::*;

fn ts(c: &mut Client, sql: &str) -> String {
    scalar(c, &format!("SELECT to_char(({sql}) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS BC')"))
        .expect("a timestamp")
}

/// An admin (the capability that defines tasks) may not set the new column:
/// its column grants on scheduled_tasks (INSERT (...), UPDATE (...), in
/// sql/access.sql and the 0.3.0--0.4.0 capability list) name every column
/// an admin writes except schedule_timezone. A zoned task can be made only
/// by the table's owner; after the update, likewise.
#[test]
fn review_zones_an_admin_may_define_a_task_in_a_time_zone() {
    let installed = fresh_db("review_zones_admin_zone");
    let mut updated = fresh_db_at_version("review_zones_admin_zone_upd", "0.3.0");
    updated.batch_execute("ALTER EXTENSION pg_distlock UPDATE TO '0.4.0'").expect("update");
    let mut results = Vec::new();
    for mut c in [connect(&installed), updated] {
        ensure_role(&mut c, "review_zones_admin");
        c.batch_execute("SELECT distlock.grant_capability('review_zones_admin', 'admin')").expect("admin");
        let insert = as_role(&mut c, "review_zones_admin", |c| {
            c.batch_execute(
                "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, schedule_timezone) \
                 VALUES ('berlin', 'report', '0 3 * * *', 'Europe/Berlin')",
            )
            .map_err(described)
        });
        c.batch_execute("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron) \
                         VALUES ('utc', 'report', '0 3 * * *')")
            .expect("owner inserts");
        let update = as_role(&mut c, "review_zones_admin", |c| {
            c.batch_execute("UPDATE distlock.scheduled_tasks SET schedule_timezone = 'Asia/Tokyo' WHERE task_name = 'utc'")
                .map_err(described)
        });
        results.push((insert, update));
    }
    assert!(
        results.iter().all(|(i, u)| i.is_ok() && u.is_ok()),
        "an admin cannot set schedule_timezone (fresh install, updated): {results:?}"
    );
}

/// Year 1 on a wall clock west of Greenwich: after 0001-01-01 00:00:00+00
/// New York's clock (LMT, -04:56:02) reads 0000-12-31 19:03:58 BC... the
/// day before year 1, and `* * * * *` next matches at 19:04:00 local,
/// 0001-01-01 00:00:02+00. croner finds nothing before year 1 and answers
/// 0001-01-01 00:00 local instead, which cron_next runs at 04:56:02+00:
/// five hours late, 296 slots skipped. The two-argument (UTC) form is right.
#[test]
fn review_zones_year_one_west_of_greenwich_is_not_five_hours_late() {
    let db = fresh_db("review_zones_year_one");
    let mut c = connect(&db);
    // Fixed by refusing it (22008), as the UTC form refuses a start before
    // year 1: a start whose wall clock is still in 1 BC is out of range.
    assert_eq!(
        sqlstate(c.batch_execute("SELECT distlock.cron_next('* * * * *', '0001-01-01 00:00:00+00', 'America/New_York')")),
        "22008",
        "never five hours late"
    );
    assert_eq!(
        ts(&mut c, "SELECT distlock.cron_next('* * * * *', '0001-01-02 00:00:00+00', 'America/New_York')"),
        "0001-01-02 00:00:02 AD",
        "a day later, the next minute of New York's wall clock"
    );
}

/// A POSIX zone is accepted as PostgreSQL accepts it, offsets up to 167
/// hours included, but resolve() looks for transitions only within two days
/// of the wall-clock time read as UTC (zone.rs WINDOW_SECONDS, "more than any
/// offset"): in '<+100>-100<+101>,M3.2.0,M11.1.0' the spring-forward gap
/// 02:00-03:00 of 2026-03-08 lies 100 hours earlier in UTC, outside the
/// window, and `0 2 * * *` is run at 2026-03-03 21:00+00, when that zone's
/// clock reads 01:00 (AT TIME ZONE says so), not at the end of the gap
/// (03:00, 22:00+00). Either refuse such a zone (22023) or answer right.
#[test]
fn review_zones_a_zone_far_from_utc_runs_a_skipped_slot_at_the_end_of_the_gap() {
    let db = fresh_db("review_zones_far_zone");
    let mut c = connect(&db);
    let zone = "<+100>-100<+101>,M3.2.0,M11.1.0";
    let result = c
        .query_one(
            "SELECT to_char(distlock.cron_next('0 2 * * *', '2026-03-03 00:00+00', $1) AT TIME ZONE 'UTC', \
                            'YYYY-MM-DD HH24:MI'), \
                    to_char(timezone($1, distlock.cron_next('0 2 * * *', '2026-03-03 00:00+00', $1)), 'HH24:MI')",
            &[&zone],
        )
        .map(|r| (r.get::<_, String>(0), r.get::<_, String>(1)));
    match result {
        Err(e) if e.code().map(|s| s.code()) == Some("22023") => {}
        other => assert_eq!(
            other.map_err(described).ok(),
            Some(("2026-03-03 22:00".to_string(), "03:00".to_string())),
            "the skipped 02:00 runs at the end of the gap"
        ),
    }
}

/// 'CET' (also 'EET', 'MET', 'WET') is an IANA zone with summer time, and
/// the scheduler runs it so (pg_tzset): `0 12 1 7 *` runs at 10:00+00, noon
/// CEST. But timezone('CET', ts), what the console and the CLI show (reads.py
/// task_definition, tasks, next_runs), takes 'CET' as the abbreviation of
/// the fixed +01:00 first, and shows 11:00 "CET". The trigger accepts a
/// name that AT TIME ZONE reads as another zone; refusing it (22023) or
/// showing the run's wall clock would do.
#[test]
fn review_zones_a_task_in_cet_is_shown_at_the_wall_clock_time_it_runs() {
    let db = fresh_db("review_zones_cet");
    let mut c = connect(&db);
    let made = c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, schedule_timezone) \
         VALUES ('noon', 'report', '0 12 1 7 *', 'CET')",
    );
    if let Err(e) = &made {
        assert_eq!(e.code().map(|s| s.code()), Some("22023"), "{e}");
        return;
    }
    // The console's read (clients/python/src/pg_distlock/inspect/reads.py TASK_ZONE, task_definition).
    let shown = scalar(
        &mut c,
        "SELECT to_char(pg_catalog.timezone(z.timezone, s.next_run_at), 'HH24:MI') \
           FROM distlock.task_schedule s \
          CROSS JOIN LATERAL (SELECT COALESCE(pg_catalog.to_jsonb(s) ->> 'schedule_timezone', 'UTC') AS timezone) z",
    );
    assert_eq!(shown.as_deref(), Some("12:00"), "the console shows another time than the task runs at");
}
