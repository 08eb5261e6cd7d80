//! distlock.run_task_now against other sessions (src/tasks/run_now.rs), as
//! a read-only fresh-eyes review of 658483f attacked it: each test failed
//! there.

use std::time::{Duration, Instant};

use crate::support::*;

/// A daily 03:00 task, next due at its next slot.
pub(crate) fn nightly(c: &mut Client) -> i32 {
    c.query_one(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron) VALUES ('nightly', 'report', '0 3 * * *') RETURNING id",
        &[],
    )
    .expect("task")
    .get(0)
}

fn run_now(c: &mut Client, id: i32) -> Result<bool, postgres::Error> {
    c.query_one(&format!("SELECT distlock.run_task_now({id})"), &[]).map(|r| r.get(0))
}

/// A claim taken in a transaction still open (the docs' "inside an
/// explicit transaction, the task stays locked until COMMIT") holds the
/// task's row: run_task_now answered only after that transaction ended (or
/// the caller's statement_timeout), not "false, a claim runs it".
#[test]
fn run_task_now_answers_at_once_while_a_claim_runs_in_an_open_transaction() {
    let db = fresh_db("run_now_open_claim");
    let (mut admin, mut worker) = (connect(&db), connect(&db));
    let id = nightly(&mut admin);
    worker.batch_execute(&format!("BEGIN; SELECT distlock.try_acquire_task_lock({id}, 'w')")).expect("claim, transaction open");
    admin.batch_execute("SET statement_timeout = '3s'").expect("timeout");
    let started = Instant::now();
    let answer = run_now(&mut admin, id);
    let took = started.elapsed();
    worker.batch_execute("COMMIT").expect("the run ends");
    assert!(matches!(answer, Ok(false)) && took < Duration::from_secs(1), "{answer:?} after {took:?}");
}

/// "False when it is due already" by the clock: a caller whose transaction
/// began before another made the task due compared with its own start and
/// answered true, moving the slot back.
#[test]
fn run_task_now_is_true_once_for_two_callers() {
    let db = fresh_db("run_now_twice");
    let (mut a, mut b) = (connect(&db), connect(&db));
    let id = nightly(&mut a);
    b.batch_execute("BEGIN; SELECT now()").expect("b's transaction begins");
    std::thread::sleep(Duration::from_millis(200));
    assert!(run_now(&mut a, id).expect("a"), "a makes it due");
    let second = run_now(&mut b, id).expect("b");
    b.batch_execute("COMMIT").expect("commit");
    assert!(!second, "due already when b asked");
}

/// A lease-mode claim whose lease ran out is no claim that runs the task:
/// run_task_now made it due only after the sweep ended the run.
#[test]
fn run_task_now_after_a_lease_ran_out_makes_the_task_due() {
    let db = fresh_db("run_now_expired_lease");
    let (mut admin, mut worker) = (connect(&db), connect(&db));
    let id = nightly(&mut admin);
    let token: Option<i64> = worker
        .query_one(&format!("SELECT distlock.try_acquire_task_lease({id}, 'w', '200 milliseconds')"), &[])
        .expect("lease")
        .get(0);
    assert!(token.is_some(), "the lease");
    drop(worker);
    eventually("the lease to run out", Duration::from_secs(5), || {
        count(&mut admin, &format!("SELECT 1 FROM distlock.scheduled_tasks WHERE id = {id} AND lease_expires_at < clock_timestamp()")) == 1
    });
    assert!(run_now(&mut admin, id).expect("run now"), "no live claim runs it");
}

/// A session-mode claim (no lease: the task lock held by the session) whose
/// backend died holds no claim: run_task_now answered false until the sweep
/// ended the run, while any worker could already claim the task when due.
#[test]
fn run_task_now_after_a_session_claims_backend_died_makes_the_task_due() {
    let db = fresh_db("run_now_dead_session_claim");
    let (mut admin, mut worker) = (connect(&db), connect(&db));
    let id = nightly(&mut admin);
    worker.batch_execute(&format!("SELECT distlock.try_acquire_task_lock({id}, 'w')")).expect("claim");
    assert!(!run_now(&mut admin, id).expect("run now while it runs"), "a live session claim runs it");
    let pid = backend_pid(&mut worker);
    admin.batch_execute(&format!("SELECT pg_terminate_backend({pid})")).expect("terminate");
    eventually("the holder to be gone", Duration::from_secs(5), || {
        count(&mut admin, &format!("SELECT 1 FROM pg_stat_activity WHERE pid = {pid}")) == 0
    });
    assert!(run_now(&mut admin, id).expect("run now"), "its holder is gone: no live claim runs it");
}

/// The same when the session lives on but let its locks go, as a pooler's
/// DISCARD ALL does.
#[test]
fn run_task_now_after_a_session_claim_lost_its_lock_makes_the_task_due() {
    let db = fresh_db("run_now_discarded_session_claim");
    let (mut admin, mut worker) = (connect(&db), connect(&db));
    let id = nightly(&mut admin);
    worker.batch_execute(&format!("SELECT distlock.try_acquire_task_lock({id}, 'w')")).expect("claim");
    worker.batch_execute("DISCARD ALL").expect("a pooler's reset");
    assert!(run_now(&mut admin, id).expect("run now"), "nobody holds the task lock: no live claim runs it");
}
