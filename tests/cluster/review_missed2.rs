//! Second review of the missed-run policies (commit 95f2b2a, issue 48):
//! breaks that need a real cluster. Each fails until it is fixed.

use std::thread;
use std::time::Duration;

use crate::support::*;

const FETCH: &str = "SELECT task_id, fencing_token FROM distlock.worker_fetch_and_execute_task($1) WHERE acquired";

/// Under `all`, a failed run leaves the slot its retries serve in
/// `retry_slot`, and the release that ends the chain schedules the slot
/// after it (sql/queries/finish_claim.sql: `COALESCE(t.retry_slot, ...)`
/// whenever `consecutive_failures > 0`). When an admin changes the
/// schedule meanwhile, the trigger (sql/schema.sql `scheduled_tasks_check`)
/// moves `next_run_at` to the new schedule's next slot, but leaves
/// `retry_slot` and `consecutive_failures` as they were. The run of the new
/// schedule's first slot then ends the "chain", and its release schedules
/// the next slot after the *old* chain's slot, hours back: the task replays
/// every slot of the new schedule since then (here 5,400 runs of an `every
/// 2 seconds` schedule that did not exist then), its first slot again among
/// them.
#[test]
fn review_missed2_a_schedule_change_mid_retry_chain_replays_from_the_old_slot() {
    let db = fresh_db("review_missed2_schedule_change");
    let mut c = connect(&db);
    let task_id: i32 = c
        .query_one(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, missed_runs, next_run_at)
             VALUES ('etl', 'etl', '0 * * * *', 'all', date_trunc('hour', now()) - interval '3 hours') RETURNING id",
            &[],
        )
        .expect("an hourly 'all' task due three hours ago")
        .get(0);
    c.query_one(FETCH, &[&"w"]).expect("its slot is claimed");
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'failed', 'boom')", &[&task_id]).expect("and fails");
    // The admin moves the task to a new schedule while the retry is pending.
    c.batch_execute("UPDATE distlock.scheduled_tasks SET schedule_cron = 'every 2 seconds'").expect("new schedule");
    let first: String = c
        .query_one("SELECT next_run_at::text FROM distlock.scheduled_tasks", &[])
        .expect("the new schedule's first slot")
        .get(0);
    thread::sleep(Duration::from_millis(2500));
    c.query_one(FETCH, &[&"w"]).expect("the new schedule's first slot is claimed");
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'completed')", &[&task_id]).expect("and completes");
    let after = scalar(
        &mut c,
        &format!("SELECT next_run_at > '{first}'::timestamptz FROM distlock.scheduled_tasks"),
    );
    let next = scalar(&mut c, "SELECT next_run_at::text FROM distlock.scheduled_tasks");
    assert_eq!(
        after.as_deref(),
        Some("t"),
        "the slot after {first} is next, not {next:?} (the old chain's slot, before the schedule change)"
    );
}

/// The same stale `retry_slot` when an admin sets `next_run_at` by hand
/// while a retry is pending under `all` (to skip a backlog ahead to the
/// current slot, say; `next_run_at` is not among the trigger's columns, so
/// nothing resets the chain): the run of the hand-set slot F ends the
/// chain, and its release schedules the slot after the chain's old slot
/// S (sql/queries/finish_claim.sql), so the task goes back in time, runs
/// every slot between S and F the admin meant to leave, and then F a
/// second time: "exactly once per due slot" breaks.
#[test]
fn review_missed2_next_run_at_set_mid_retry_chain_runs_its_slot_twice() {
    let db = fresh_db("review_missed2_hand_set");
    let mut c = connect(&db);
    let task_id: i32 = c
        .query_one(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, missed_runs, next_run_at)
             VALUES ('etl', 'etl', '0 * * * *', 'all', date_trunc('hour', now()) - interval '5 hours') RETURNING id",
            &[],
        )
        .expect("an hourly 'all' task due five hours ago")
        .get(0);
    c.query_one(FETCH, &[&"w"]).expect("its slot is claimed");
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'failed', 'boom')", &[&task_id]).expect("and fails");
    c.batch_execute("UPDATE distlock.scheduled_tasks SET next_run_at = date_trunc('hour', now())")
        .expect("the admin moves the task to the current hour's slot");
    c.query_one(FETCH, &[&"w"]).expect("the current hour's slot is claimed");
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'completed')", &[&task_id]).expect("and completes");
    let next = scalar(&mut c, "SELECT next_run_at::text FROM distlock.scheduled_tasks");
    let after = scalar(&mut c, "SELECT next_run_at > date_trunc('hour', now()) FROM distlock.scheduled_tasks");
    assert_eq!(
        after.as_deref(),
        Some("t"),
        "the current hour's slot ran; the next is after it, not {next:?}, from which the slot runs again"
    );
}

/// The per-fetch budget (src/tasks/missed.rs FETCH_STEPS_MAX = 100,000
/// slots stepped, and an `all` task with `missed_runs_max = 1000` may take
/// 84,066 of them: STEPS_MAX + PROBES_MAX * (max + 1) + 2) bounds counts,
/// not time: each step is a full `next_occurrence_in_zone` (the cron parsed
/// and the zone looked up again every call), about 20 us, so one such task
/// after a long outage makes every fetch take about two seconds. A worker
/// fetching under a statement_timeout of a second is cancelled, its skip
/// rolls back, and the same task (the oldest due) is first again in the
/// next fetch: no fetch ever succeeds, and no other task (here a plain
/// `once` task, due too) runs again until someone intervenes.
#[test]
fn review_missed2_one_long_backlog_times_out_every_fetch() {
    let db = fresh_db("review_missed2_slow_fetch");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks
               (task_name, task_type, schedule_cron, schedule_timezone, missed_runs, missed_runs_max, next_run_at)
         VALUES ('backfill', 'etl', '* * * * *', 'Europe/Berlin', 'all', 1000,
                 date_trunc('minute', now()) - interval '300 days');
         INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
         VALUES ('report', 'report', '0 * * * *', now() - interval '1 minute')",
    )
    .expect("a per-minute backfill down for 300 days, and a due report");
    let mut w = connect(&db);
    w.batch_execute("SET statement_timeout = '1s'").expect("a worker's timeout");
    for attempt in 1..=3 {
        let started = std::time::Instant::now();
        let fetched = w.query_opt(FETCH, &[&format!("w{attempt}")]);
        assert!(
            fetched.is_ok(),
            "fetch {attempt} under a 1 s statement_timeout failed after {:?}: {}",
            started.elapsed(),
            fetched.err().map(described).unwrap_or_default()
        );
    }
}

/// docs/tasks.md, "Missed runs", as it now reads: a due time set by hand on
/// a slot of the schedule is that slot and is skipped like it when older
/// than the grace; run_task_now runs it late. (This review found the docs
/// promising that any hand-set time runs: the code cannot tell a hand-set
/// slot from the schedule's, so the docs changed.) Between slots, a
/// hand-set time runs however late.
#[test]
fn review_missed2_skip_drops_a_due_time_set_by_hand() {
    let db = fresh_db("review_missed2_hand_set_skip");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, missed_runs, missed_runs_grace)
         VALUES ('report', 'report', '0 * * * *', 'skip', interval '1 second');
         -- The admin asks for the report of two hours ago again.
         UPDATE distlock.scheduled_tasks SET next_run_at = date_trunc('hour', now()) - interval '2 hours'",
    )
    .expect("an hourly skip task, next_run_at set by hand");
    let fetched = c.query_opt(FETCH, &[&"w"]).expect("fetch");
    let hand_set = "date_trunc('hour', now()) - interval '2 hours'";
    let skipped =
        count(&mut c, &format!("SELECT 1 FROM distlock.task_execution_log WHERE status = 'skipped' AND scheduled_for = {hand_set}"));
    assert_eq!(skipped, 1, "a hand-set slot of the schedule is skipped like it");
    let ran = count(&mut c, &format!("SELECT 1 FROM distlock.task_execution_log WHERE status <> 'skipped' AND scheduled_for = {hand_set}"));
    assert_eq!(ran, 0, "the hand-set slot did not run");
    if fetched.is_some() {
        // In the first second of an hour, the first slot within the grace
        // (the hour's) is kept and claimed by the same fetch.
        c.batch_execute("SELECT distlock.release_task_lock(id, 'w', 'completed') FROM distlock.scheduled_tasks")
            .expect("release the kept slot's run");
    }
    // Between slots, a hand-set time runs however late; so does run_task_now's.
    c.batch_execute("UPDATE distlock.scheduled_tasks SET next_run_at = date_trunc('hour', now()) - interval '2 hours 1 minute'")
        .expect("between slots");
    let fetched = c.query_opt(FETCH, &[&"w"]).expect("fetch");
    assert!(fetched.is_some(), "a due time between slots runs");
}
