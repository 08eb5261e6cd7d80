//! `every N seconds` and `every N minutes`: slots at whole multiples of the
//! period since the Unix epoch, whatever the time zone.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    use crate::test_sql::{assert_sqlstate, required};

    fn next_utc(expr: &str, after: &str) -> String {
        required::<String>(&format!(
            "SELECT to_char(distlock.cron_next('{expr}', '{after}'::timestamptz) AT TIME ZONE 'UTC', \
             'YYYY-MM-DD HH24:MI:SS.US')"
        ))
    }

    #[pg_test]
    fn interval_slots_are_multiples_of_the_period() {
        assert_eq!(next_utc("every 30 seconds", "2026-01-01 00:00:10+00"), "2026-01-01 00:00:30.000000");
        assert_eq!(next_utc("every 30 seconds", "2026-01-01 00:00:30+00"), "2026-01-01 00:01:00.000000");
        assert_eq!(next_utc("every 1 second", "2026-01-01 00:00:00.5+00"), "2026-01-01 00:00:01.000000");
        assert_eq!(next_utc("every 15 minutes", "2026-01-01 10:07:00+00"), "2026-01-01 10:15:00.000000");
        assert_eq!(next_utc("Every 2 Minutes", "2026-01-01 10:07:00+00"), "2026-01-01 10:08:00.000000");
        // 7 s does not divide a minute: multiples of 7 s since 1970, not of the minute.
        let seven = required::<bool>(
            "SELECT bool_and(extract(epoch FROM distlock.cron_next('every 7 seconds', t))::bigint % 7 = 0 \
                         AND distlock.cron_next('every 7 seconds', t) > t \
                         AND distlock.cron_next('every 7 seconds', t) <= t + interval '7 seconds') \
               FROM generate_series(timestamptz '2026-03-08 06:00:00+00', timestamptz '2026-03-08 08:00:00+00', \
                                    interval '1.3 seconds') t",
        );
        assert!(seven);
    }

    #[pg_test]
    fn interval_slots_ignore_the_time_zone_and_its_transitions() {
        // Across New York's spring-forward transition: elapsed time only.
        let same = required::<bool>(
            "SELECT bool_and(distlock.cron_next('every 10 minutes', t, 'America/New_York') \
                             = distlock.cron_next('every 10 minutes', t)) \
               FROM generate_series(timestamptz '2026-03-08 05:00:00+00', timestamptz '2026-03-08 09:00:00+00', \
                                    interval '97 seconds') t",
        );
        assert!(same);
        // An unknown zone is refused all the same.
        assert_sqlstate("distlock.cron_next('every 10 minutes', now(), 'Mars/Olympus_Mons')", "22023");
    }

    #[pg_test]
    fn interval_bad_spellings_are_refused_with_22023() {
        for bad in [
            "every 0 seconds", "every 60 seconds", "every 60 minutes", "every 5 hours", "every x seconds",
            "every 05 seconds", "every +5 seconds", "every 5", "every", "every 5 seconds please", "every -1 seconds",
        ] {
            assert_sqlstate(&format!("distlock.cron_next('{bad}', now())"), "22023");
        }
    }

    #[pg_test]
    fn interval_task_first_slot_and_next_after_a_release() {
        let id = required::<i32>(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron) \
             VALUES ('ticker', 'test', 'every 5 seconds') RETURNING id",
        );
        assert!(required::<bool>(&format!(
            "SELECT next_run_at > now() AND next_run_at <= now() + interval '5 seconds' \
                AND extract(epoch FROM next_run_at)::numeric % 5 = 0 \
               FROM distlock.scheduled_tasks WHERE id = {id}"
        )));
    }
}
