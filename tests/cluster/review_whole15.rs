//! Fifteenth whole review (ea92dab): schedules in zones, missed-run policies,
//! next_task_wait. Each test fails until its break is fixed.

use crate::support::*;

const FETCH: &str = "SELECT task_id, fencing_token FROM distlock.worker_fetch_and_execute_task($1) WHERE acquired";

/// Under `all`, the release of a run schedules the slot after the slot the
/// run served (sql/queries/finish_claim.sql, the `ELSE f.scheduled_for`
/// branch for a run that is no retry), with the task's *current* schedule.
/// When an admin changes the schedule while the run is under way, the
/// trigger (sql/schema.sql `scheduled_tasks_check`) moves `next_run_at` to
/// the new schedule's next slot, and the release then overwrites it with
/// the new schedule's first slot after the *old* slot: here an hourly task
/// moved to `every 2 seconds` mid-run replays up to 1,800 runs of a
/// schedule that did not exist then, oldest first. The fix for the retry
/// chain (review_missed2) checks whether the served slot is one of the
/// current schedule; a plain run needs the same check (and then the slot
/// after the run's end, or the trigger's slot).
#[test]
fn review_whole15_a_schedule_change_during_a_run_replays_from_its_slot_under_all() {
    let db = fresh_db("review_whole15_schedule_change_mid_run");
    let mut c = connect(&db);
    let task_id: i32 = c
        .query_one(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, missed_runs, next_run_at)
             VALUES ('etl', 'etl', '0 * * * *', 'all', date_trunc('hour', now())) RETURNING id",
            &[],
        )
        .expect("an hourly 'all' task, its slot this hour's")
        .get(0);
    c.query_one(FETCH, &[&"w"]).expect("its slot is claimed");
    // While the run is under way, the admin moves the task to a new schedule.
    c.batch_execute("UPDATE distlock.scheduled_tasks SET schedule_cron = 'every 2 seconds'").expect("new schedule");
    let first: String = c
        .query_one("SELECT next_run_at::text FROM distlock.scheduled_tasks", &[])
        .expect("the new schedule's first slot")
        .get(0);
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'completed')", &[&task_id]).expect("the run completes");
    let next = scalar(&mut c, "SELECT next_run_at::text FROM distlock.scheduled_tasks");
    let stale = scalar(&mut c, &format!("SELECT next_run_at < '{first}'::timestamptz FROM distlock.scheduled_tasks"));
    assert_eq!(
        stale.as_deref(),
        Some("f"),
        "the next slot is at or after the new schedule's first, {first}, not {next:?}: slots of the new schedule \
         since the old slot (this hour's start) are replayed"
    );
}

/// docs/tasks.md, "Missed runs": "at most 100,000 slots stepped through per
/// fetch, 20,000 per task: past that ... a task's count is a lower bound and
/// its message says so". The code counts a task's slots up to 10,000
/// (src/tasks/missed.rs STEPS_MAX) and a fetch's up to 60,000
/// (FETCH_STEPS_MAX): a per-second `skip` task 15,000 slots behind is
/// counted as 10,000 (`runs_skipped` and the log say 10,000, "counted up to
/// 10000 slots"), where the docs promised an exact count. Fixed in the docs
/// (10,000 a task, 60,000 a fetch): a task 9,000 slots behind is counted
/// one by one.
#[test]
fn review_whole15_the_documented_per_task_step_bound_is_not_the_code_s() {
    let db = fresh_db("review_whole15_step_bound");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, missed_runs, missed_runs_grace, next_run_at)
         VALUES ('tick', 'tick', 'every 1 seconds', 'skip', '0', date_trunc('second', now()) - interval '9000 seconds')",
    )
    .expect("a per-second 'skip' task 9,000 slots behind");
    c.query(FETCH, &[&"w"]).expect("a fetch skips its missed slots");
    let skipped: i64 = c
        .query_one("SELECT runs_skipped FROM distlock.scheduled_tasks", &[])
        .expect("runs_skipped")
        .get(0);
    let message = scalar(
        &mut c,
        "SELECT error_message FROM distlock.task_execution_log WHERE status = 'skipped' ORDER BY id DESC LIMIT 1",
    );
    assert!(
        skipped >= 9_000 && message.as_deref().is_some_and(|m| !m.contains("counted up to")),
        "9,000 slots, under the documented 10,000 per task, are counted one by one: runs_skipped {skipped}, \
         message {message:?}"
    );
}

/// next_task_wait leaves out every task whose `current_token` is set and
/// that has no lease (sql/queries/next_task_wait.sql, `unclaimed`: "one a
/// session claim holds is left out: it comes due again when the claim ends
/// (or the sweep ends it)"). But a session claim whose holder died has
/// ended: its lock went with the backend, and the next fetch claims the
/// task at once (sql/queries/claim_task.sql does not look at
/// `current_token`; src/tasks/claim.rs takes the free lock). Until a sweep
/// runs, next_task_wait answers the wait of some later task (here an hour)
/// or NULL, so an idle TaskWorker sleeps its whole poll interval while a
/// dead worker's task is due and claimable. (review_missed3 fixed the same
/// for an expired lease.) Fix: count a session-claimed task whose lock is
/// free (no live holder in task_lock_holders) as unclaimed.
#[test]
fn review_whole15_next_task_wait_misses_a_dead_session_holder_s_task() {
    let db = fresh_db("review_whole15_wait_dead_session");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
         VALUES ('a', 'a', '0 0 * * *', now() - interval '1 minute'),
                ('b', 'b', '0 0 * * *', now() + interval '1 hour')",
    )
    .expect("a task due now, another in an hour");
    {
        let mut dead = connect(&db);
        let claimed = dead.query(FETCH, &[&"dead"]).expect("a worker claims 'a' in session mode");
        assert_eq!(claimed.len(), 1);
    } // its connection closes: the holder is gone, its lock with it.
    eventually("the dead worker's backend ends", std::time::Duration::from_secs(10), || {
        count(&mut c, "SELECT 1 FROM distlock.task_lock_holders") == 0
    });
    let wait = scalar(&mut c, "SELECT distlock.next_task_wait()::text");
    let claimable = count(&mut c, "SELECT 1 FROM distlock.worker_fetch_and_execute_task('w') WHERE acquired");
    assert_eq!(claimable, 1, "a fetch claims the dead worker's task at once");
    assert_eq!(
        wait.as_deref(),
        Some("00:00:00"),
        "next_task_wait says a task may be claimed now, not {wait:?}"
    );
}

/// A task in a retry chain when the database is updated from 0.3.0 (or
/// when an admin switches a task from `once` to `all` mid-chain) has
/// `consecutive_failures > 0` and no `retry_slot` (the update adds it NULL;
/// under `once` nothing sets it). An admin then sets `missed_runs = 'all'`,
/// as docs/tasks.md suggests for a backfill. The retry's release takes
/// `f.scheduled_for`, the retry time, as the slot served
/// (sql/queries/finish_claim.sql: `retry_slot IS NOT NULL` is required for
/// the chain's slot, and the fallback is the run's own `scheduled_for`), so
/// the next slot is the first after the retry, and every slot between the
/// failed first attempt's (3 hours back) and now is dropped: neither run
/// nor logged `skipped`, against "each missed slot runs as its own claim"
/// and "the retries of a failed run serve its slot". Fix: with
/// consecutive_failures > 0 and no retry_slot, take the chain's slot from
/// its first attempt's log row (attempt 1), or have the update and the
/// trigger's switch to `all` fill retry_slot.
#[test]
fn review_whole15_all_after_the_update_drops_the_slots_of_a_0_3_0_retry_chain() {
    let mut c = fresh_db_at_version("review_whole15_upgrade_chain", "0.3.0");
    let task_id: i32 = c
        .query_one(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at, retry_delay)
             VALUES ('etl', 'etl', '0 * * * *', date_trunc('hour', now()) - interval '3 hours', '1 second') RETURNING id",
            &[],
        )
        .expect("an hourly task, its slot 3 hours back")
        .get(0);
    c.query_one(FETCH, &[&"w"]).expect("its slot is claimed under 0.3.0");
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'failed', 'boom')", &[&task_id]).expect("and fails");
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("the update");
    c.batch_execute("UPDATE distlock.scheduled_tasks SET missed_runs = 'all'").expect("a backfill from now on");
    std::thread::sleep(std::time::Duration::from_millis(1100));
    c.query_one(FETCH, &[&"w"]).expect("the retry is claimed");
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'completed')", &[&task_id]).expect("and completes");
    let next = scalar(&mut c, "SELECT next_run_at::text FROM distlock.scheduled_tasks");
    let expected = scalar(&mut c, "SELECT (date_trunc('hour', now()) - interval '2 hours')::text");
    let skipped = count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'skipped'");
    assert_eq!(
        next, expected,
        "the slot after the chain's (3 hours back) is next; the slots since are dropped ({skipped} logged skipped)"
    );
}

/// Under `all`, the release schedules the slot after the one the run
/// served, `f.scheduled_for` (sql/queries/finish_claim.sql), which is the
/// task's `next_run_at` when it was claimed. The `-infinity` case was fixed
/// (review_missed: a slot before year 1 is "no slot of the schedule"), but
/// not `infinity`: a task an admin parked with `next_run_at = 'infinity'`
/// and then ran by hand (try_acquire_task_lock claims whatever the slot)
/// cannot be released: cron_next raises 22008 for an infinite start, on
/// every try. With `max_retries = 0` and a timeout, the sweep's
/// `timed_out` takes the same branch, and check_and_recover_timeout_tasks,
/// which ends every task's overdue claims in one transaction, fails on it
/// each time: no claim in the database is recovered, no job lease reaped.
/// Under `once` both work (from the run's end). Fix: treat a slot past
/// cron_next's range like one before year 1 (from the run's end).
#[test]
fn review_whole15_all_a_run_for_infinity_cannot_be_released_and_stops_the_sweep() {
    let db = fresh_db("review_whole15_all_infinity");
    let mut c = connect(&db);
    let task_id: i32 = c
        .query_one(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, missed_runs, next_run_at,
                                                   max_retries, timeout)
             VALUES ('parked', 'etl', '0 * * * *', 'all', 'infinity', 0, '1 second') RETURNING id",
            &[],
        )
        .expect("an 'all' task parked at infinity")
        .get(0);
    let mut holder = connect(&db);
    let claimed: bool = holder
        .query_one("SELECT distlock.try_acquire_task_lock($1, 'w')", &[&task_id])
        .expect("run by hand")
        .get(0);
    assert!(claimed);
    std::thread::sleep(std::time::Duration::from_millis(1200));
    let swept = c.batch_execute("SELECT * FROM distlock.check_and_recover_timeout_tasks()");
    let released = holder.batch_execute(&format!("SELECT distlock.release_task_lock({task_id}, 'w', 'completed')"));
    // The sweep times the run out and terminates its holder (a hung session
    // is let go of that way), whose release then finds its connection gone.
    let released = if holder.is_closed() { Ok(()) } else { released };
    assert!(
        swept.is_ok() && released.is_ok(),
        "the sweep ends the overdue claim ({:?}); a release is accepted or refused, never an error ({:?})",
        swept.map_err(described),
        released.map_err(described)
    );
}

/// try_acquire_task_lock "claims a task now whatever its slot" (docs/tasks.md,
/// "Missed runs": `skip` and `all` do not apply to it). But the claim logs
/// the task's *next* slot, still in the future, as its `scheduled_for`
/// (sql/queries/claim_task.sql), and under `all` the release schedules the
/// slot after the one the run served (sql/queries/finish_claim.sql): an
/// operator who runs a daily task by hand at 09:00 silently drops the next
/// midnight run (no run, no `skipped` row) and the task next runs a day
/// later. Under `once` the midnight run stays. Fix: a run that starts
/// before its `scheduled_for` serves no slot of the schedule (schedule from
/// the run's end, or from the start of the run), or log the claim's
/// scheduled_for as the time it was claimed for.
#[test]
fn review_whole15_all_a_run_by_hand_before_its_slot_drops_that_slot() {
    let db = fresh_db("review_whole15_all_early_run");
    let mut c = connect(&db);
    let task_id: i32 = c
        .query_one(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, missed_runs)
             VALUES ('nightly', 'etl', '0 0 * * *', 'all') RETURNING id",
            &[],
        )
        .expect("a daily 'all' task")
        .get(0);
    let slot = scalar(&mut c, "SELECT next_run_at::text FROM distlock.scheduled_tasks");
    let claimed: bool = c
        .query_one("SELECT distlock.try_acquire_task_lock($1, 'w')", &[&task_id])
        .expect("run by hand")
        .get(0);
    assert!(claimed);
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'completed')", &[&task_id]).expect("and completed");
    let next = scalar(&mut c, "SELECT next_run_at::text FROM distlock.scheduled_tasks");
    assert_eq!(next, slot, "the next midnight still runs after a run by hand");
}
