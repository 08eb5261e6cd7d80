//! Review of the missed-run policies (commit 397dcea, issue 48 item 2):
//! breaks that need a real cluster. Each fails until it is fixed.

use std::thread;
use std::time::Duration;

use crate::support::*;

const FETCH: &str = "SELECT task_id, fencing_token FROM distlock.worker_fetch_and_execute_task($1) WHERE acquired";

/// A fetch skips a task's missed slots under the task's lock and, when the
/// kept slot is still in the future, unlocks the task at once
/// (src/tasks/claim.rs: `unlock_task` on NotEligible) while its transaction
/// still holds the row lock of the skip's UPDATE (sql/queries/skip_missed_slots.sql).
/// Another worker's fetch then takes the task's lock, runs the same UPDATE
/// and waits on that row until the first fetch's transaction ends
/// (src/tasks/missed.rs `skip_missed`): a worker that fetches in an explicit
/// transaction (or a long fetch skipping many tasks) stalls every other
/// worker's fetch, even of tasks that are due and free. Before the change a
/// fetch never waited: a task held by another claim is passed over.
#[test]
fn review_missed_an_uncommitted_skip_stalls_every_other_fetch() {
    let db = fresh_db("review_missed_stall");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks
               (task_name, task_type, schedule_cron, next_run_at, missed_runs, missed_runs_grace)
         VALUES ('stale', 'report', '0 * * * *', now() - interval '3 hours', 'skip', interval '0');
         INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
         VALUES ('due-1', 'report', '0 * * * *', now() - interval '1 minute'),
                ('due-2', 'report', '0 * * * *', now() - interval '1 minute')",
    )
    .expect("a stale task and two due ones");
    let mut a = connect(&db);
    a.batch_execute("BEGIN").expect("begin");
    let first = a.query_opt(FETCH, &[&"a"]).expect("a's fetch");
    assert!(first.is_some(), "a skips 'stale' (its kept slot is in the future) and claims a due task");
    // a's transaction stays open (a worker that runs its task inside it).
    let mut b = connect(&db);
    b.batch_execute("SET statement_timeout = '3s'").expect("timeout");
    let second = b.query_opt(FETCH, &[&"b"]);
    a.batch_execute("COMMIT").expect("commit");
    match second {
        Ok(row) => assert!(row.is_some(), "b claims the other due task"),
        Err(e) => panic!("b's fetch waited on a's uncommitted skip of another task: {}", described(e)),
    }
}

/// A task whose `next_run_at` is `-infinity` (or any slot before year 1)
/// was claimed and rescheduled as usual under `once`. Under `skip` or `all`
/// with a maximum, the fetch plans the skip by calling cron_next from that
/// slot (src/tasks/missed.rs `skip_missed` -> `next`), which raises 22008,
/// and the error aborts the whole fetch: every worker's fetch fails, for
/// every task, as long as that one task is due.
#[test]
fn review_missed_one_task_due_at_minus_infinity_fails_every_fetch() {
    let db = fresh_db("review_missed_infinity");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)
         VALUES ('other', 'report', '0 * * * *', now() - interval '1 minute')",
    )
    .expect("another due task");
    for (n, policy) in ["missed_runs = 'once'", "missed_runs = 'skip', missed_runs_grace = '1 minute'",
        "missed_runs = 'all', missed_runs_max = 3"]
        .into_iter()
        .enumerate()
    {
        c.batch_execute(&format!(
            "DELETE FROM distlock.scheduled_tasks WHERE task_name = 'odd';
             INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron) VALUES ('odd', 'report', '0 * * * *');
             UPDATE distlock.scheduled_tasks SET {policy} WHERE task_name = 'odd';
             UPDATE distlock.scheduled_tasks SET next_run_at = '-infinity' WHERE task_name = 'odd'"
        ))
        .expect("a task due since -infinity");
        let mut w = connect(&db);
        let worker = format!("w{n}");
        let fetched = w.query_opt(FETCH, &[&worker]);
        assert!(fetched.is_ok(), "{policy}: a fetch with one task due since -infinity: {}",
            fetched.err().map(described).unwrap_or_default());
    }
}

/// Under `all`, a run whose slot is `-infinity` (next_run_at set so by an
/// admin; `once` handles it) is claimed, and its release fails: finish_claim.sql
/// computes the next slot with cron_next from the slot the run served, which
/// raises 22008 for -infinity. The claim can never be released, and its
/// task never runs again.
#[test]
fn review_missed_all_a_run_for_minus_infinity_cannot_be_released() {
    let db = fresh_db("review_missed_infinity_all");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, missed_runs)
         VALUES ('odd', 'report', '0 * * * *', 'all');
         UPDATE distlock.scheduled_tasks SET next_run_at = '-infinity'",
    )
    .expect("a task due since -infinity");
    let row = c.query_one(FETCH, &[&"w"]).expect("claimed");
    let task_id: i32 = row.get(0);
    let released = c.execute("SELECT distlock.release_task_lock($1, 'w', 'completed')", &[&task_id]);
    assert!(released.is_ok(), "the release of a run for -infinity: {}", released.err().map(described).unwrap_or_default());
    let next = scalar(&mut c, "SELECT next_run_at > now() FROM distlock.scheduled_tasks");
    assert_eq!(next.as_deref(), Some("t"), "the next slot is a real one");
}

/// docs/tasks.md, "Missed runs": `skip` and `all` do not apply "to
/// `run_task_now`, whose slot is now", and run_task_now's entry says "the
/// next worker to look claims it". Yet run_task_now only sets next_run_at
/// (sql/queries/task_run_now.sql), and a fetch that comes more than
/// missed_runs_grace later plans a skip from that slot like any other
/// (src/tasks/missed.rs `plan_skip`): the operator's "run now" is logged as
/// skipped, "older than missed_runs_grace", and nothing runs until the next
/// cron slot.
#[test]
fn review_missed_skip_drops_a_run_task_now_request() {
    let db = fresh_db("review_missed_run_now");
    let mut c = connect(&db);
    let task_id: i32 = c
        .query_one(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, missed_runs, missed_runs_grace)
             VALUES ('report', 'report', '0 0 1 1 *', 'skip', interval '1 second') RETURNING id",
            &[],
        )
        .expect("a yearly task with a grace of 1 second")
        .get(0);
    let ran: bool = c.query_one("SELECT distlock.run_task_now($1)", &[&task_id]).expect("run now").get(0);
    assert!(ran, "run_task_now makes it due now");
    // The workers look two seconds later (busy, restarting).
    thread::sleep(Duration::from_millis(2500));
    let fetched = c.query_opt(FETCH, &[&"w"]).expect("fetch");
    let skipped = count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'skipped'");
    assert!(fetched.is_some(), "the next worker to look claims the run-now slot ({skipped} slot skipped instead)");
}

/// Under `all`, a retry serves "its first attempt's slot", looked up in the
/// log (sql/queries/finish_claim.sql: the latest attempt-1 row before the
/// retry). With max_retries up to 1000 and retry_delay up to 1 hour a
/// slot's retries last weeks, and prune_execution_log removes the first
/// attempt's row meanwhile: the lookup then falls back to the retry's own
/// slot (the retry time), and the release schedules the first cron slot
/// after it. Every slot between the first attempt's and the retry's is
/// dropped without a run or a `skipped` row, against "each missed slot
/// runs as its own claim".
#[test]
fn review_missed_all_a_pruned_first_attempt_drops_the_slots_after_it() {
    let db = fresh_db("review_missed_pruned");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at, missed_runs, max_retries)
         VALUES ('all', 'report', 'every 10 minutes', distlock.cron_next('every 10 minutes', now() - interval '1 hour'),
                 'all', 1000)",
    )
    .expect("a task due an hour ago");
    let first = c.query_one(FETCH, &[&"w"]).expect("the first attempt");
    let task_id: i32 = first.get(0);
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'failed', 'boom')", &[&task_id]).expect("fail");
    let slot: String = c
        .query_one("SELECT scheduled_for::text FROM distlock.task_execution_log WHERE attempt = 1", &[])
        .expect("the first attempt's slot")
        .get(0);
    // The retries went on for more than the log's retention (one week
    // here): the first attempt's row is pruned.
    c.batch_execute(
        "UPDATE distlock.task_execution_log SET completed_at = now() - interval '8 days', started_at = now() - interval '8 days';
         SELECT distlock.prune_execution_log(interval '7 days');
         UPDATE distlock.scheduled_tasks SET next_run_at = now()",
    )
    .expect("the first attempt's row pruned, the retry due");
    c.query_one(FETCH, &[&"w"]).expect("the retry");
    c.execute("SELECT distlock.release_task_lock($1, 'w', 'completed')", &[&task_id]).expect("done");
    let next = scalar(
        &mut c,
        &format!("SELECT (t.next_run_at - '{slot}'::timestamptz)::text FROM distlock.scheduled_tasks t"),
    );
    assert_eq!(next.as_deref(), Some("00:10:00"), "the slot after the first attempt's is next, not one after the retry");
}

/// docs/tasks.md, "Missed runs": "At most 1,000 skipped slots are logged one
/// by one per fetch ... Slots are counted one by one up to 20,000 per
/// fetch", which is what keeps a fetch bounded after a long outage. The
/// bounds are per task (src/tasks/missed.rs LOGGED_MAX, STEPS_MAX, applied
/// in `plan_skip` for each task the fetch tries): a fetch that passes over
/// many stale tasks whose kept slot is in the future (src/tasks/fetch.rs
/// goes on to the next due task) logs 1,000 rows and steps 20,000 slots for
/// each, all in one transaction holding every such task's row (about 0.3 s
/// a task here: a server-wide outage of a year with 1,000 per-minute tasks
/// makes one fetch of five minutes writing a million log rows, while every
/// other worker's fetch waits on those rows).
#[test]
fn review_missed_a_fetch_is_not_bounded_by_the_documented_per_fetch_limits() {
    let db = fresh_db("review_missed_per_fetch");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks
               (task_name, task_type, schedule_cron, next_run_at, missed_runs, missed_runs_grace, schedule_timezone)
         SELECT 'minutely-' || g, 'report', '* * * * *',
                -- A slot of the schedule: only those are skipped.
                distlock.cron_next('* * * * *', now() - interval '1 year', 'Europe/Berlin'),
                'skip', interval '0', 'Europe/Berlin'
           FROM generate_series(1, 10) g",
    )
    .expect("ten per-minute tasks after a year's outage");
    let started = std::time::Instant::now();
    c.query_opt(FETCH, &[&"w"]).expect("one fetch");
    let took = started.elapsed();
    let logged = count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'skipped'");
    let counted: i64 = c
        .query_one("SELECT sum(runs_skipped)::bigint FROM distlock.scheduled_tasks", &[])
        .expect("counted")
        .get(0);
    assert!(
        logged <= 1000 && counted <= 20_000,
        "one fetch logged {logged} skipped slots and counted {counted} (docs: at most 1,000 and 20,000 per fetch); it took {took:?}"
    );
}
