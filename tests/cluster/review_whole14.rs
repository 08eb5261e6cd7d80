//! Review 14 of the whole 0.4.0 change (helper review-whole14): breaks in
//! the schedules' time zones that need a real cluster. Each fails until it
//! is fixed.

use crate::support::*;

/// Two POSIX rules, each one's offset within 26 hours for half of the year
/// and 30 hours (refused by cron_next) for the other half: whatever the
/// date, one of them is within 26 hours now.
const WINTER_OK: &str = "AAA-20BBB-30,M3.2.0,M11.1.0";
const SUMMER_OK: &str = "AAA-30BBB-20,M3.2.0,M11.1.0";

/// docs/tasks.md: "Refused with 22023 on insert and update of a task: ...
/// one more than 26 hours from UTC". The trigger checks the zone with one
/// @daily slot from now (src/schedule/zone.rs checks the offsets within two
/// days of it), so a rule that is 30 hours from UTC in the other half of the
/// year is accepted; from its first slot in that half, every release of the
/// task fails (22023) and so does every run of the sweep (below).
#[test]
fn review_whole14_a_zone_more_than_26_hours_from_utc_half_the_year_is_refused() {
    let db = fresh_db("review_whole14_far_zone");
    let mut c = connect(&db);
    let mut accepted = Vec::new();
    for (n, zone) in [WINTER_OK, SUMMER_OK].into_iter().enumerate() {
        let insert = c.execute(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, schedule_timezone) \
             VALUES ($1, 'report', '0 3 * * *', $2)",
            &[&format!("far-{n}"), &zone],
        );
        if insert.is_ok() {
            // Months from now in which a release's next slot fails.
            let fails = (0..12)
                .filter(|m| {
                    let mut probe = connect(&db);
                    probe
                        .execute(
                            "SELECT distlock.cron_next('0 3 * * *', now() + make_interval(months => $1), $2)",
                            &[m, &zone],
                        )
                        .is_err()
                })
                .count();
            accepted.push(format!("{zone} (its next slot fails {fails} months of 12)"));
        }
    }
    assert!(accepted.is_empty(), "accepted as a task's zone: {accepted:?}");
}

/// Puts distlock.timezone back when the test ends, however it ends.
struct ResetTimezone(u16);

impl Drop for ResetTimezone {
    fn drop(&mut self) {
        let mut c = connect_to(self.0, "postgres", "review_whole14");
        // Two statements: ALTER SYSTEM cannot run in a multi-statement batch.
        let _ = c.batch_execute("ALTER SYSTEM RESET distlock.timezone");
        let _ = c.batch_execute("SELECT pg_reload_conf()");
    }
}

/// distlock.timezone's check hook (src/gucs.rs timezone_check ->
/// schedule::is_known_zone) looks at the zone's offset now only, so it takes a
/// rule that is 30 hours from UTC in the other half of the year. A task
/// without a zone of its own, its next slot in that half, then cannot be
/// released (22023), and check_and_recover_timeout_tasks, which ends every
/// task's overdue claims in one transaction, fails on it each time: no other
/// task's claim is recovered, no expired job lease reaped, in the whole
/// database, until an operator finds the setting.
#[test]
fn review_whole14_a_setting_far_from_utc_half_the_year_does_not_stop_the_sweep() {
    let db = fresh_db("review_whole14_far_setting");
    let mut c = connect(&db);
    let _reset = ResetTimezone(primary_port());
    // The slot in the half where the rule is 30 hours from UTC (northern
    // summer for WINTER_OK, winter for SUMMER_OK).
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, timeout, max_retries) \
         VALUES ('far-summer', 't', '0 3 1 7 *', '1 second', 0), ('far-winter', 't', '0 3 1 1 *', '1 second', 0), \
                ('other-tenant', 't', '0 3 * * *', '1 second', 3)",
    )
    .expect("tasks, in UTC");
    let mut taken = None;
    for zone in [WINTER_OK, SUMMER_OK] {
        if c.batch_execute(&format!("ALTER SYSTEM SET distlock.timezone = '{zone}'")).is_ok() {
            taken = Some(zone);
            break;
        }
    }
    let Some(zone) = taken else { return }; // both refused: fixed
    c.batch_execute("SELECT pg_reload_conf()").expect("reload");
    eventually("the setting to apply", std::time::Duration::from_secs(10), || {
        let mut fresh = connect(&db);
        scalar(&mut fresh, "SHOW distlock.timezone").as_deref() == Some(zone)
    });
    let mut c = connect(&db);
    let bad = if zone == WINTER_OK { "far-summer" } else { "far-winter" };
    let lease = |c: &mut Client, task: &str, worker: &str| -> i64 {
        c.query_one(
            "SELECT distlock.try_acquire_task_lease((SELECT id FROM distlock.scheduled_tasks WHERE task_name = $1), $2, '1 hour')",
            &[&task, &worker],
        )
        .expect("claim")
        .get::<_, Option<i64>>(0)
        .expect("claimed")
    };
    lease(&mut c, bad, "w-bad");
    lease(&mut c, "other-tenant", "w-other");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let swept = c.query("SELECT task_id FROM distlock.check_and_recover_timeout_tasks()", &[]).map_err(described);
    assert!(
        swept.is_ok(),
        "distlock.timezone = '{zone}' was accepted, and the sweep fails on task {bad}, recovering no task: {swept:?}"
    );
}

/// cron_next with a zone east of UTC panics (XX000, a Rust backtrace in the
/// DETAIL) for a start near the end of chrono's range: src/schedule/mod.rs
/// adds the zone's offset to the start with chrono's `+`, which panics on
/// overflow. The UTC form and the start-before-year-1 case are 22008 (the
/// documented code for a start out of range); any role with a capability
/// may call it.
#[test]
fn review_whole14_cron_next_at_the_end_of_the_range_in_a_zone_is_22008_not_a_panic() {
    let db = fresh_db("review_whole14_range_end");
    let mut c = connect(&db);
    let state = sqlstate(c.batch_execute(
        "SELECT distlock.cron_next('* * * * *', '262142-12-31 23:59:59+00', 'Asia/Tokyo')",
    ));
    assert_eq!(state, "22008", "a start at the end of the range in Asia/Tokyo");
}

/// forget_truncated_attempts (sql/queue.sql, AFTER TRUNCATE) deletes the
/// attempts of every job it sees in neither task_queue nor completed_jobs,
/// with the transaction's snapshot: in a REPEATABLE READ transaction whose
/// snapshot predates a job's completion (its row moved to completed_jobs
/// since), `TRUNCATE distlock.task_queue` deletes that completed job's
/// history, though the job is still in completed_jobs.
#[test]
fn review_whole14_a_truncate_under_an_old_snapshot_keeps_a_completed_jobs_history() {
    let db = fresh_db("review_whole14_rr_truncate");
    let mut c = connect(&db);
    let job: i64 = c.query_one("SELECT distlock.enqueue_task('job', p_queue => 'q')", &[]).expect("enqueue").get(0);
    c.batch_execute("SELECT distlock.consume_task('w1', '1 second', p_queues => ARRAY['q'])").expect("claim");
    std::thread::sleep(std::time::Duration::from_millis(1300));
    // The expired lease is taken over: attempt 1 is recorded (expired).
    c.batch_execute("SELECT distlock.consume_task('w2', p_queues => ARRAY['q'])").expect("take over");
    let attempts = |c: &mut Client| count(c, &format!("SELECT FROM distlock.job_attempts WHERE job_id = {job}"));
    assert_eq!(attempts(&mut c), 1, "the expired attempt is recorded");
    let mut old = connect(&db);
    old.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM distlock.job_attempts")
        .expect("a snapshot");
    c.batch_execute(&format!("SELECT distlock.complete_task({job}, 'w2')")).expect("complete");
    old.batch_execute("TRUNCATE distlock.task_queue; COMMIT").expect("truncate the queue");
    assert_eq!(count(&mut c, &format!("SELECT FROM distlock.completed_jobs WHERE id = {job}")), 1, "the job is kept");
    assert_eq!(attempts(&mut c), 1, "the completed job's attempt history was deleted by the TRUNCATE");
}
