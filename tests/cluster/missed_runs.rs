//! Missed-run policies (issue 48, item 2) after a simulated outage: tasks
//! whose due slot is five hours old, every 10 minutes, then a fleet of
//! workers started. `once` runs once; `skip` logs each slot older than its
//! grace as skipped and runs the first within it; `all` runs each slot in
//! turn, oldest first, or only the newest `missed_runs_max`, the older ones
//! logged as skipped.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// Five workers fetch and complete at once until every task's next slot is
/// in the future (or 60 s pass).
fn run_fleet(db: &str, fetch: &'static str) {
    let started = Instant::now();
    let workers: Vec<_> = (0..5)
        .map(|w| {
            let db = db.to_string();
            thread::spawn(move || {
                let mut c = connect(&db);
                let worker = format!("w{w}");
                let mut idle = 0;
                while started.elapsed() < Duration::from_secs(60) && idle < 20 {
                    let row = c.query_opt(fetch, &[&worker]).expect("fetch");
                    let Some((task_id, token)) = row.map(|row| (row.get::<_, i32>(0), row.get::<_, i64>(1))) else {
                        idle += 1;
                        thread::sleep(Duration::from_millis(25));
                        continue;
                    };
                    idle = 0;
                    if fetch == LEASE_FETCH {
                        c.execute("SELECT distlock.release_task_lease($1, $2, 'completed')", &[&task_id, &token])
                    } else {
                        c.execute("SELECT distlock.release_task_lock($1, $2, 'completed')", &[&task_id, &worker])
                    }
                    .expect("release");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("worker");
    }
}

const SESSION_FETCH: &str =
    "SELECT task_id, fencing_token FROM distlock.worker_fetch_and_execute_task($1) WHERE acquired";
const LEASE_FETCH: &str =
    "SELECT task_id, fencing_token FROM distlock.worker_fetch_and_execute_task($1, interval '1 minute') WHERE acquired";

/// The slots of `task`'s log rows with `status`, in the order they were
/// logged, as seconds since 1970.
fn slots(c: &mut Client, task: &str, status: &str) -> Vec<i64> {
    c.query(
        "SELECT extract(epoch FROM l.scheduled_for)::bigint FROM distlock.task_execution_log l \
           JOIN distlock.scheduled_tasks t ON t.id = l.task_id \
          WHERE t.task_name = $1 AND l.status = $2 ORDER BY l.id",
        &[&task, &status],
    )
    .expect("log")
    .iter()
    .map(|row| row.get(0))
    .collect()
}

fn assert_every_ten_minutes(slots: &[i64], what: &str) {
    for pair in slots.windows(2) {
        assert_eq!(pair[1] - pair[0], 600, "{what}: slots 10 minutes apart, oldest first: {slots:?}");
    }
}

fn outage(c: &mut Client) {
    // Slots every 10 minutes; each task's due slot five hours old.
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks
               (task_name, task_type, schedule_cron, next_run_at, missed_runs, missed_runs_grace, missed_runs_max)
         SELECT name, 'report', 'every 10 minutes',
                distlock.cron_next('every 10 minutes', now() - interval '5 hours'), policy, grace, max
           FROM (VALUES ('once', 'once', NULL::interval, NULL::int),
                        ('skip', 'skip', interval '25 minutes', NULL),
                        ('all', 'all', NULL, NULL),
                        ('all-5', 'all', NULL, 5)) AS v (name, policy, grace, max)",
    )
    .expect("tasks due five hours ago");
}

fn check_outage_runs(c: &mut Client) {
    let future = count(c, "SELECT 1 FROM distlock.scheduled_tasks WHERE next_run_at > now() AND current_token IS NULL");
    assert_eq!(future, 4, "every task's next slot is in the future once the fleet caught up");
    let first: i64 = scalar(c, "SELECT extract(epoch FROM distlock.cron_next('every 10 minutes', now() - interval '5 hours'))::bigint")
        .and_then(|s| s.parse().ok())
        .expect("first slot");
    // once: one run, for the oldest slot; nothing skipped.
    assert_eq!(slots(c, "once", "completed"), vec![first], "once: one run for all missed slots");
    assert!(slots(c, "once", "skipped").is_empty());

    // skip: each slot older than 25 minutes when fetched skipped, then the
    // first slot within the grace runs once.
    let skipped = slots(c, "skip", "skipped");
    let ran = slots(c, "skip", "completed");
    assert_eq!(skipped.first(), Some(&first), "skip: the oldest slot is skipped first");
    assert!(skipped.len() >= 27, "skip: about 28 slots are older than the grace: {skipped:?}");
    assert_every_ten_minutes(&skipped, "skip");
    assert_eq!(ran.len(), 1, "skip: one run after the skip: {ran:?}");
    assert_eq!(ran[0] - skipped[skipped.len() - 1], 600, "skip: the run is the first slot after the skipped ones");
    let graced = count(
        c,
        "SELECT 1 FROM distlock.task_execution_log l JOIN distlock.scheduled_tasks t ON t.id = l.task_id \
          WHERE t.task_name = 'skip' AND l.status = 'completed' \
            AND l.scheduled_for >= l.started_at - interval '25 minutes' \
            AND l.scheduled_for - interval '10 minutes' < l.started_at - interval '25 minutes'",
    );
    assert_eq!(graced, 1, "skip: the slot run is the oldest within the grace when fetched");
    let counted = scalar(c, "SELECT runs_skipped FROM distlock.task_schedule WHERE task_name = 'skip'");
    assert_eq!(counted, Some(skipped.len().to_string()), "skip: runs_skipped counts the skipped slots");
    let stats = scalar(c, "SELECT concat_ws('/', runs, skipped) FROM distlock.task_stats WHERE task_name = 'skip'");
    assert_eq!(stats, Some(format!("1/{}", skipped.len())), "task_stats: a skipped slot is not a run");

    // all: every slot, oldest first, each its own run.
    let ran = slots(c, "all", "completed");
    assert_eq!(ran.first(), Some(&first), "all: the oldest slot runs first");
    assert!(ran.len() >= 30, "all: every slot of five hours runs: {} runs", ran.len());
    assert_every_ten_minutes(&ran, "all");
    assert!(slots(c, "all", "skipped").is_empty());

    // all with at most 5: the newest 5 due when fetched run; older skipped.
    let skipped = slots(c, "all-5", "skipped");
    let ran = slots(c, "all-5", "completed");
    assert_eq!(skipped.first(), Some(&first), "all-5: the oldest slots are skipped");
    let mut every = skipped.clone();
    every.extend(&ran);
    assert_every_ten_minutes(&every, "all-5");
    // Five, and one more for each slot that came while the fleet ran.
    let came = count(
        c,
        "SELECT 1 FROM generate_series(0, 3) k, distlock.task_execution_log l \
           JOIN distlock.scheduled_tasks t ON t.id = l.task_id \
          WHERE t.task_name = 'all-5' AND l.status = 'skipped' AND l.id = (SELECT max(id) FROM distlock.task_execution_log \
                WHERE task_id = t.id AND status = 'skipped') \
            AND distlock.cron_next('every 10 minutes', l.started_at) + k * interval '10 minutes' <= now()",
    );
    assert_eq!(ran.len() as i64, 5 + came, "all-5: the newest 5 slots run: {ran:?}");
}

#[test]
fn missed_runs_after_an_outage_session_claims() {
    let db = fresh_db("missed_runs_session");
    let mut c = connect(&db);
    outage(&mut c);
    run_fleet(&db, SESSION_FETCH);
    check_outage_runs(&mut c);
}

#[test]
fn missed_runs_after_an_outage_lease_claims() {
    let db = fresh_db("missed_runs_lease");
    let mut c = connect(&db);
    outage(&mut c);
    run_fleet(&db, LEASE_FETCH);
    check_outage_runs(&mut c);
}

/// Under `all`, a retry serves the slot of its first attempt: the slot
/// after that one is next, not the first after the retry.
#[test]
fn missed_runs_all_a_retry_serves_its_first_attempts_slot() {
    let db = fresh_db("missed_runs_retry");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at, missed_runs)
         VALUES ('all', 'report', 'every 10 minutes', distlock.cron_next('every 10 minutes', now() - interval '1 hour'), 'all')",
    )
    .expect("a task due an hour ago");
    let fetch = "SELECT task_id, fencing_token FROM distlock.worker_fetch_and_execute_task('w') WHERE acquired";
    let first = c.query_one(fetch, &[]).expect("the first attempt");
    let task_id: i32 = first.get(0);
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'failed', 'boom')", &[&task_id]).expect("fail");
    c.batch_execute("UPDATE distlock.scheduled_tasks SET next_run_at = now()").expect("the retry due at once");
    c.query_one(fetch, &[]).expect("the retry");
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'completed')", &[&task_id]).expect("done");
    let next = scalar(
        &mut c,
        "SELECT (t.next_run_at - l.scheduled_for)::text FROM distlock.scheduled_tasks t
           JOIN distlock.task_execution_log l ON l.task_id = t.id AND l.attempt = 1",
    );
    assert_eq!(next.as_deref(), Some("00:10:00"), "the slot after the first attempt's is next");
}

#[test]
fn missed_runs_settings_are_checked() {
    let db = fresh_db("missed_runs_checks");
    let mut c = connect(&db);
    for (policy, grace, max) in [("'sometimes'", "NULL", "NULL"), ("'skip'", "NULL", "NULL"), ("'skip'", "'-1 minute'", "NULL"),
        ("'all'", "NULL", "0"), ("'all'", "NULL", "1001"), ("NULL", "NULL", "NULL")]
    {
        let insert = c.batch_execute(&format!(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, missed_runs, missed_runs_grace, missed_runs_max)
             VALUES ('t', 'report', '@hourly', {policy}, {grace}, {max})"
        ));
        assert_eq!(sqlstate(insert), "22023", "missed_runs {policy}, grace {grace}, max {max}");
    }
    c.batch_execute("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron) VALUES ('t', 'report', '@hourly')")
        .expect("a task");
    assert_eq!(scalar(&mut c, "SELECT missed_runs FROM distlock.task_schedule").as_deref(), Some("once"), "the default");
    let update = c.batch_execute("UPDATE distlock.scheduled_tasks SET missed_runs = 'skip'");
    assert_eq!(sqlstate(update), "22023", "skip needs a grace on update too");
    c.batch_execute("UPDATE distlock.scheduled_tasks SET missed_runs = 'skip', missed_runs_grace = '5 minutes'")
        .expect("skip with a grace");
}

/// next_task_wait: how long an idle worker may sleep. 0 for a due task, the
/// time to the earliest next_run_at otherwise, tasks a claim runs left out,
/// NULL with none scheduled, and a scoped worker is told only of its tasks.
#[test]
fn next_task_wait_tells_an_idle_worker_when_its_next_task_is_due() {
    let db = fresh_db("next_task_wait");
    let mut c = connect(&db);
    let wait = |c: &mut Client| scalar(c, "SELECT round(extract(epoch FROM distlock.next_task_wait()))::text");
    assert_eq!(wait(&mut c), None, "no task");
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) VALUES
           ('in-an-hour', 'report', now() + interval '1 hour'), ('in-a-minute', 'etl', now() + interval '1 minute');",
    )
    .expect("tasks");
    assert_eq!(wait(&mut c).as_deref(), Some("60"));
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) VALUES ('due', 'report', now() - interval '1 minute')",
    )
    .expect("a due task");
    assert_eq!(wait(&mut c).as_deref(), Some("0"), "one is due now");
    let mut worker = connect(&db);
    let claimed = scalar(&mut worker, "SELECT task_name FROM distlock.worker_fetch_and_execute_task('w') WHERE acquired");
    assert_eq!(claimed.as_deref(), Some("due"));
    assert_eq!(wait(&mut c).as_deref(), Some("60"), "a task a claim runs is left out");
    // A worker scoped to the report type is told of its task only.
    c.batch_execute(
        "DROP ROLE IF EXISTS next_wait_worker; CREATE ROLE next_wait_worker LOGIN;
         SELECT distlock.grant_capability('next_wait_worker', 'worker', 'report');",
    )
    .expect("a scoped worker");
    c.batch_execute("SET ROLE next_wait_worker").expect("as the scoped worker");
    assert_eq!(wait(&mut c).as_deref(), Some("3600"), "the scoped worker's next task is in an hour");
    c.batch_execute("RESET ROLE").expect("reset");
    // Tasks outside its scope change nothing of its answer.
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at)
         SELECT 'other-' || g, 'etl', now() + interval '5 minutes' FROM generate_series(1, 81) g;
         UPDATE distlock.scheduled_tasks SET next_run_at = now() + interval '10 minutes' WHERE task_name = 'in-a-minute';
         SET ROLE next_wait_worker;",
    )
    .expect("81 tasks of another tenant first");
    assert_eq!(wait(&mut c).as_deref(), Some("3600"), "no time taken from tasks outside the scope");
    c.batch_execute("RESET ROLE").expect("reset");
}
