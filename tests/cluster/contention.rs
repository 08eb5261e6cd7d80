//! Many workers on the same tasks: every due slot runs exactly once.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// Creates `n` tasks with a once-a-year cron, all due now, and a table that
/// refuses two overlapping runs of one task.
fn yearly_tasks(db: &str, n: i32) {
    connect(db)
        .batch_execute(&format!(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
             SELECT 'task-' || i, 'report', '0 0 1 1 *', now() FROM generate_series(1, {n}) i; \
             CREATE TABLE inflight (task_id int PRIMARY KEY); \
             CREATE TABLE runs (task_id int, worker text, token bigint);"
        ))
        .expect("tasks");
}

/// How a worker holds its claims.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Session,
    Lease,
}

impl Mode {
    /// Takes the `w`th worker of a mixed fleet: half hold session claims, half leases.
    fn of_worker(w: usize) -> Mode {
        if w % 4 < 2 {
            Mode::Session
        } else {
            Mode::Lease
        }
    }

    fn fetch_one(self) -> &'static str {
        match self {
            Mode::Session => "SELECT task_id, fencing_token, acquired FROM distlock.worker_fetch_and_execute_task($1)",
            Mode::Lease => {
                "SELECT task_id, fencing_token, acquired FROM distlock.worker_fetch_and_execute_task($1, '1 minute')"
            }
        }
    }

    fn fetch_three(self) -> &'static str {
        match self {
            Mode::Session => "SELECT task_id, fencing_token FROM distlock.try_acquire_multiple_tasks($1, 3)",
            Mode::Lease => "SELECT task_id, fencing_token FROM distlock.try_acquire_multiple_tasks($1, 3, '1 minute')",
        }
    }

    fn release(self, client: &mut Client, worker: &str, task_id: i32, token: i64) {
        match self {
            Mode::Session => client.execute("SELECT distlock.release_task_lock($1, $2, 'completed')", &[&task_id, &worker]),
            Mode::Lease => client.execute("SELECT distlock.release_task_lease($1, $2, 'completed')", &[&task_id, &token]),
        }
        .expect("release");
    }
}

/// One claimed run: mark it in flight (a second overlapping run would hit the
/// primary key), record it, then release it as completed.
fn run_task_in(mode: Mode, client: &mut Client, worker: &str, task_id: i32, token: i64, work: Duration) {
    client.execute("INSERT INTO inflight VALUES ($1)", &[&task_id]).expect("no overlapping run");
    if !work.is_zero() {
        thread::sleep(work); // the task's own work, not synchronisation
    }
    client.execute("INSERT INTO runs VALUES ($1, $2, $3)", &[&task_id, &worker, &token]).expect("run");
    client.execute("DELETE FROM inflight WHERE task_id = $1", &[&task_id]).expect("done");
    mode.release(client, worker, task_id, token);
}

fn assert_each_task_ran_once(db: &str, n: i64) {
    let mut c = connect(db);
    assert_eq!(count(&mut c, "SELECT 1 FROM runs"), n, "runs");
    assert_eq!(count(&mut c, "SELECT DISTINCT task_id FROM runs"), n, "distinct tasks run");
    assert_eq!(
        count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'completed'"),
        n,
        "completed log rows"
    );
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status <> 'completed'"), 0);
    assert_eq!(
        count(&mut c, "SELECT 1 FROM distlock.scheduled_tasks WHERE next_run_at <= now() OR current_token IS NOT NULL"),
        0,
        "every task moved on to next year"
    );
}

#[test]
fn ten_workers_run_each_of_100_tasks_exactly_once() {
    ten_workers_run_100_tasks("contention_100", |_| Mode::Session);
}

#[test]
fn ten_lease_mode_workers_run_each_of_100_tasks_exactly_once() {
    ten_workers_run_100_tasks("contention_100_lease", |_| Mode::Lease);
}

fn ten_workers_run_100_tasks(name: &str, mode_of: fn(usize) -> Mode) {
    let db = fresh_db(name);
    yearly_tasks(&db, 100);
    let workers: Vec<_> = (0..10)
        .map(|w| {
            let db = db.clone();
            let mode = mode_of(w);
            thread::spawn(move || {
                let worker = format!("worker-{w}");
                let mut c = connect(&db);
                let mut ran = 0;
                loop {
                    let row = c.query_one(mode.fetch_one(), &[&worker]).expect("fetch");
                    if !row.get::<_, bool>(2) {
                        break;
                    }
                    run_task_in(mode, &mut c, &worker, row.get(0), row.get(1), Duration::from_millis(2));
                    ran += 1;
                }
                ran
            })
        })
        .collect();
    let total: i32 = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    assert_eq!(total, 100);
    assert_each_task_ran_once(&db, 100);
}

/// The one-commit loop: each call releases the run just finished and claims
/// the next due task, session and lease-mode workers mixed.
#[test]
fn ten_workers_looping_release_and_fetch_run_each_of_100_tasks_exactly_once() {
    let db = fresh_db("contention_release_and_fetch");
    yearly_tasks(&db, 100);
    let workers: Vec<_> = (0..10)
        .map(|w| {
            let db = db.clone();
            let mode = Mode::of_worker(w);
            thread::spawn(move || {
                let worker = format!("worker-{w}");
                let mut c = connect(&db);
                let mut ran = 0;
                let mut row = c.query_one(mode.fetch_one(), &[&worker]).expect("fetch");
                while row.get::<_, bool>(2) {
                    let (task_id, token): (i32, i64) = (row.get(0), row.get(1));
                    c.execute("INSERT INTO inflight VALUES ($1)", &[&task_id]).expect("no overlapping run");
                    thread::sleep(Duration::from_millis(2)); // the task's own work, not synchronisation
                    c.execute("INSERT INTO runs VALUES ($1, $2, $3)", &[&task_id, &worker, &token]).expect("run");
                    c.execute("DELETE FROM inflight WHERE task_id = $1", &[&task_id]).expect("done");
                    row = match mode {
                        Mode::Session => c.query_one(
                            "SELECT task_id, fencing_token, acquired \
                             FROM distlock.release_and_fetch_task($1, $2, 'completed')",
                            &[&task_id, &worker],
                        ),
                        Mode::Lease => c.query_one(
                            "SELECT task_id, fencing_token, acquired \
                             FROM distlock.release_and_fetch_task($1, $2, 'completed', $3, '1 minute')",
                            &[&task_id, &token, &worker],
                        ),
                    }
                    .expect("release and fetch");
                    ran += 1;
                }
                let held = count(&mut c, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()");
                assert_eq!(held, 0, "the last release gave its task lock back at commit");
                ran
            })
        })
        .collect();
    let total: i32 = workers.into_iter().map(|w| w.join().expect("worker")).sum();
    assert_eq!(total, 100);
    assert_each_task_ran_once(&db, 100);
}

/// The recipe's failure: a release that unlocks before its updates commit,
/// raced by claims that do not re-check, re-runs finished slots. Here workers
/// keep claiming and releasing in tight loops for a while after everything
/// is done, batch and single claims mixed, inside explicit transactions.
#[test]
fn release_racing_claims_never_reruns_a_slot() {
    release_racing_claims("contention_race", |_| Mode::Session);
}

/// The same race with session and lease-mode workers mixed: each mode's
/// claims exclude the other's.
#[test]
fn release_racing_claims_never_reruns_a_slot_with_session_and_lease_workers_mixed() {
    release_racing_claims("contention_race_mixed", Mode::of_worker);
}

fn release_racing_claims(name: &str, mode_of: fn(usize) -> Mode) {
    let db = fresh_db(name);
    yearly_tasks(&db, 20);
    let until = Instant::now() + Duration::from_secs(4);
    let workers: Vec<_> = (0..10)
        .map(|w| {
            let db = db.clone();
            let mode = mode_of(w);
            thread::spawn(move || {
                let worker = format!("racer-{w}");
                let mut c = connect(&db);
                while Instant::now() < until {
                    let claimed: Vec<(i32, i64)> = if w % 2 == 0 {
                        c.query(mode.fetch_three(), &[&worker])
                    } else {
                        c.query(&format!("SELECT task_id, fencing_token FROM ({}) f WHERE acquired", mode.fetch_one()), &[&worker])
                    }
                    .expect("claim")
                    .iter()
                    .map(|r| (r.get(0), r.get(1)))
                    .collect();
                    for (task_id, token) in claimed {
                        // Release inside a transaction that does more work after
                        // it: the lock must stay held until COMMIT.
                        c.batch_execute("BEGIN").expect("begin");
                        run_task_in(mode, &mut c, &worker, task_id, token, Duration::ZERO);
                        c.execute("SELECT pg_sleep(0.001)", &[]).expect("work after release");
                        c.batch_execute("COMMIT").expect("commit");
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    assert_each_task_ran_once(&db, 20);
}

#[test]
fn application_advisory_locks_do_not_block_task_claims() {
    let db = fresh_db("contention_keyspace");
    yearly_tasks(&db, 1);
    let mut app = connect(&db);
    // The application locks every plausible bigint form of the task's key.
    app.batch_execute(
        "SELECT pg_advisory_lock(1); \
         SELECT pg_advisory_lock((distlock.task_lock_class()::bigint << 32) | 1); \
         SELECT pg_advisory_lock(distlock.lock_id('task-1'));",
    )
    .expect("app locks");
    let mut worker = connect(&db);
    let claimed: bool = worker
        .query_one("SELECT distlock.try_acquire_task_lock(1, 'w')", &[])
        .expect("claim")
        .get(0);
    assert!(claimed);
    // And a held task lock does not block the application's keys either.
    let free: bool = connect(&db).query_one("SELECT pg_try_advisory_lock(1, 1)", &[]).expect("try").get(0);
    assert!(free, "int4 pair (1, 1) is not the task key (class, 1)");
}

#[test]
fn only_the_holding_session_may_release() {
    let db = fresh_db("contention_release");
    yearly_tasks(&db, 1);
    let mut holder = connect(&db);
    let mut other = connect(&db);
    assert!(holder.query_one("SELECT distlock.try_acquire_task_lock(1, 'w1')", &[]).expect("claim").get::<_, bool>(0));
    // Same worker name, different session: refused, nothing changes.
    let refused = other.execute("SELECT distlock.release_task_lock(1, 'w1', 'completed')", &[]);
    assert_eq!(sqlstate(refused), "55000");
    assert!(!other.query_one("SELECT distlock.try_acquire_task_lock(1, 'w2')", &[]).expect("claim").get::<_, bool>(0));
    assert_eq!(count(&mut other, "SELECT 1 FROM distlock.running_tasks WHERE holder_alive AND worker_id = 'w1'"), 1);
    holder.execute("SELECT distlock.release_task_lock(1, 'w1', 'completed')", &[]).expect("release");
    // Double release, now in a later transaction: the claim is gone.
    let again = holder.execute("SELECT distlock.release_task_lock(1, 'w1', 'completed')", &[]);
    assert_eq!(sqlstate(again), "55000");
}
