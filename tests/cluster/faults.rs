//! Real process faults: a worker process frozen with SIGSTOP while it holds
//! a claim, past the claim's lease or timeout, then resumed with SIGCONT.
//! It must be fenced out (its write and its release refused) and the task
//! must have exactly one recorded result.
//!
//! The worker is a psql process running a script. It claims, then does its
//! "work": waiting for an advisory lock the test holds, which makes the
//! moment it is frozen deterministic (it is stopped while its backend is
//! seen waiting; no sleeps).

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::Duration;

use crate::support::*;

const WORK_LOCK: i64 = 4242;

fn fenced_task(db: &str, timeout: &str) -> Client {
    let mut c = connect(db);
    c.batch_execute(&format!(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at, timeout, retry_delay) \
           VALUES ('report', 'report', '0 0 1 1 *', now(), '{timeout}', '1 millisecond'); \
         CREATE TABLE results (token bigint); \
         CREATE FUNCTION fence() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF NOT distlock.check_fencing_token(1, NEW.token) THEN \
             RAISE EXCEPTION 'stale token %', NEW.token USING ERRCODE = '40001'; END IF; \
           RETURN NEW; END $$; \
         CREATE TRIGGER fence BEFORE INSERT ON results FOR EACH ROW EXECUTE FUNCTION fence();"
    ))
    .expect("fenced task");
    c
}

/// Starts the worker process: claim with `fetch`, wait on WORK_LOCK (the
/// work), write the result under its token, release with `release`.
fn start_worker(db: &str, fetch: &str, release: &str) -> Child {
    let mut child = Command::new(pg_bin("psql"))
        .args(["-X", "-q", "-At", "-h", "127.0.0.1", "-p", &primary_port().to_string(), "-U", "postgres", "-d", db])
        .env("PGAPPNAME", "frozen-worker")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql");
    let script = format!(
        "\\set VERBOSITY sqlstate\n\
         SELECT fencing_token AS token FROM {fetch} \\gset\n\
         SELECT pg_advisory_lock({WORK_LOCK});\n\
         INSERT INTO results VALUES (:token);\n\
         {release};\n"
    );
    child.stdin.take().expect("stdin").write_all(script.as_bytes()).expect("script");
    child
}

fn signal(child: &Child, sig: &str) {
    let status = Command::new("kill").args([sig, &child.id().to_string()]).status().expect("kill");
    assert!(status.success(), "kill {sig}");
}

/// Freezes the worker while its backend waits for WORK_LOCK, then lets the
/// backend finish that wait (the frozen process does not read the result).
fn freeze_at_work(observer: &mut Client, work_lock: Client, worker: &Child) {
    eventually("the worker to claim and start its work", Duration::from_secs(10), || {
        count(
            observer,
            "SELECT 1 FROM pg_stat_activity WHERE application_name = 'frozen-worker' AND wait_event_type = 'Lock'",
        ) == 1
    });
    signal(worker, "-STOP");
    drop(work_lock); // the test's session ends, and with it WORK_LOCK
}

fn finish(worker: Child) -> (bool, String) {
    let out = worker.wait_with_output().expect("worker exits");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn hold_work_lock(db: &str) -> Client {
    let mut c = connect(db);
    c.batch_execute(&format!("SELECT pg_advisory_lock({WORK_LOCK})")).expect("work lock");
    c
}

#[test]
fn a_frozen_lease_holder_is_fenced_out_when_it_resumes() {
    let db = fresh_db("faults_sigstop_lease");
    let mut c = fenced_task(&db, "1 hour");
    let work_lock = hold_work_lock(&db);
    let worker = start_worker(
        &db,
        "distlock.worker_fetch_and_execute_task('frozen', '1 second')",
        "SELECT distlock.release_task_lease(1, :token, 'completed')",
    );
    freeze_at_work(&mut c, work_lock, &worker);
    // While it is frozen, its lease runs out and another worker takes over.
    let token = eventually_claimed(
        &mut c,
        "the lease to run out and be taken over",
        Duration::from_secs(10),
        "SELECT fencing_token FROM distlock.worker_fetch_and_execute_task('rescuer', '1 minute')",
    );
    c.execute("INSERT INTO results VALUES ($1)", &[&token]).expect("rescuer writes");
    c.execute("SELECT distlock.release_task_lease(1, $1, 'completed')", &[&token]).expect("rescuer releases");
    signal(&worker, "-CONT");
    let (_, stderr) = finish(worker);
    assert!(stderr.contains("ERROR:  40001"), "the frozen worker's write was fenced out: {stderr}");
    assert!(stderr.contains("ERROR:  55000"), "the frozen worker's release was refused: {stderr}");
    assert_eq!(count(&mut c, "SELECT 1 FROM results"), 1, "exactly one result");
    assert_eq!(count(&mut c, &format!("SELECT 1 FROM results WHERE token = {token}")), 1);
    assert_eq!(
        scalar(&mut c, "SELECT string_agg(status, ',' ORDER BY id) FROM distlock.task_execution_log").as_deref(),
        Some("abandoned,completed")
    );
}

#[test]
fn a_frozen_session_holder_past_its_timeout_is_ended_and_fenced_out() {
    let db = fresh_db("faults_sigstop_session");
    let mut c = fenced_task(&db, "1 second");
    let work_lock = hold_work_lock(&db);
    let worker = start_worker(
        &db,
        "distlock.worker_fetch_and_execute_task('frozen')",
        "SELECT distlock.release_task_lock(1, 'frozen', 'completed')",
    );
    freeze_at_work(&mut c, work_lock, &worker);
    // Past its timeout, the sweep ends the frozen worker's session.
    let mut swept = Vec::new();
    eventually("the sweep to time the claim out", Duration::from_secs(10), || {
        swept = c
            .query("SELECT worker_id, lock_released FROM distlock.check_and_recover_timeout_tasks()", &[])
            .expect("sweep")
            .iter()
            .map(|r| (r.get::<_, String>(0), r.get::<_, bool>(1)))
            .collect();
        !swept.is_empty()
    });
    assert_eq!(swept, vec![("frozen".to_string(), true)]);
    let token = eventually_claimed(
        &mut c,
        "the retry to be claimed",
        Duration::from_secs(10),
        "SELECT fencing_token FROM distlock.worker_fetch_and_execute_task('rescuer')",
    );
    c.execute("INSERT INTO results VALUES ($1)", &[&token]).expect("rescuer writes");
    c.execute("SELECT distlock.release_task_lock(1, 'rescuer', 'completed')", &[]).expect("rescuer releases");
    signal(&worker, "-CONT");
    let (succeeded, stderr) = finish(worker);
    assert!(!succeeded, "the frozen worker finds its session ended: {stderr}");
    assert_eq!(count(&mut c, "SELECT 1 FROM results"), 1, "exactly one result");
    assert_eq!(count(&mut c, &format!("SELECT 1 FROM results WHERE token = {token}")), 1);
    assert_eq!(
        scalar(&mut c, "SELECT string_agg(status, ',' ORDER BY id) FROM distlock.task_execution_log").as_deref(),
        Some("timed_out,completed")
    );
}

/// A connection that keeps trying until the server accepts it (it may be
/// restarting after a crash).
fn reconnect(db: &str, application_name: &str) -> Client {
    let mut client = None;
    eventually("the server to accept connections", Duration::from_secs(60), || {
        let url = format!(
            "host=127.0.0.1 port={} user=postgres dbname={db} application_name={application_name}",
            primary_port()
        );
        client = Client::connect(&url, NoTls).ok();
        client.is_some()
    });
    client.expect("connected")
}

/// One fleet worker's round: claim a due task, write its result and release
/// in one transaction (so a death between the two cannot record a result
/// without finishing the slot). Errors (its connection killed) go up.
fn fleet_round(c: &mut Client, worker: &str, lease_mode: bool) -> Result<bool, postgres::Error> {
    let fetch = if lease_mode {
        "SELECT task_id, fencing_token FROM distlock.worker_fetch_and_execute_task($1, '2 seconds') WHERE acquired"
    } else {
        "SELECT task_id, fencing_token FROM distlock.worker_fetch_and_execute_task($1) WHERE acquired"
    };
    let Some(row) = c.query_opt(fetch, &[&worker])? else {
        return Ok(false);
    };
    let (task_id, token): (i32, i64) = (row.get(0), row.get(1));
    let mut tx = c.transaction()?;
    tx.execute("INSERT INTO results VALUES ($1, $2)", &[&task_id, &token])?;
    if lease_mode {
        tx.execute("SELECT distlock.release_task_lease($1, $2, 'completed')", &[&task_id, &token])?;
    } else {
        tx.execute("SELECT distlock.release_task_lock($1, $2, 'completed')", &[&task_id, &worker])?;
    }
    tx.commit()?;
    Ok(true)
}

/// kill -9 of a client process holding a claim, then kill -9 of a worker's
/// backend (the postmaster then restarts every session), while a fleet of
/// session and lease-mode workers runs: every due slot still has exactly
/// one result.
#[test]
fn kill_9_of_a_client_and_of_a_backend_leaves_every_slot_run_exactly_once() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let db = fresh_db("faults_kill_9");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at, retry_delay) \
           SELECT 'task-' || i, 'report', '0 0 1 1 *', now(), '1 millisecond' FROM generate_series(1, 40) i; \
         CREATE TABLE results (task_id int, token bigint); \
         CREATE FUNCTION fence() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           IF NOT distlock.check_fencing_token(NEW.task_id, NEW.token) THEN \
             RAISE EXCEPTION 'stale token %', NEW.token USING ERRCODE = '40001'; END IF; \
           RETURN NEW; END $$; \
         CREATE TRIGGER fence BEFORE INSERT ON results FOR EACH ROW EXECUTE FUNCTION fence();",
    )
    .expect("tasks");

    // 1. A client process holding a session claim is killed with SIGKILL.
    let work_lock = hold_work_lock(&db);
    let mut doomed = start_worker(
        &db,
        "distlock.worker_fetch_and_execute_task('doomed')",
        "SELECT distlock.release_task_lock(1, 'doomed', 'completed')",
    );
    eventually("the doomed client to claim", Duration::from_secs(10), || {
        count(&mut c, "SELECT 1 FROM pg_stat_activity WHERE application_name = 'frozen-worker' AND wait_event_type = 'Lock'")
            == 1
    });
    signal(&doomed, "-KILL");
    doomed.wait().expect("reaped");
    drop(work_lock);

    // 2. The fleet runs; a worker's backend is killed with SIGKILL mid-run.
    let stop = Arc::new(AtomicBool::new(false));
    let fleet: Vec<_> = (0..6)
        .map(|w| {
            let (db, stop) = (db.clone(), stop.clone());
            thread::spawn(move || {
                let name = format!("fleet-{w}");
                let mut client = reconnect(&db, &name);
                while !stop.load(Ordering::Relaxed) {
                    match fleet_round(&mut client, &name, w % 2 == 1) {
                        Ok(true) => thread::sleep(Duration::from_millis(20)), // the task's work
                        Ok(false) => thread::sleep(Duration::from_millis(20)), // poll interval
                        Err(_) if client.is_closed() => client = reconnect(&db, &name),
                        Err(_) => {} // fenced out or lost the claim: claim again
                    }
                }
            })
        })
        .collect();
    eventually("the fleet to finish some tasks", Duration::from_secs(20), || {
        count(&mut c, "SELECT 1 FROM results") >= 5
    });
    let victim: i32 = c
        .query_one("SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'fleet-%' LIMIT 1", &[])
        .expect("a fleet backend")
        .get(0);
    let status = Command::new("kill").args(["-KILL", &victim.to_string()]).status().expect("kill");
    assert!(status.success());
    eventually("the postmaster to end every session", Duration::from_secs(30), || {
        c.simple_query("SELECT 1").is_err()
    });
    let mut c = reconnect(&db, "nemesis-observer");
    eventually("every slot to complete after the crash", Duration::from_secs(60), || {
        // The sweep recovers session claims the restart ended.
        let _ = c.query("SELECT distlock.check_and_recover_timeout_tasks()", &[]);
        count(&mut c, "SELECT 1 FROM distlock.scheduled_tasks WHERE next_run_at <= now()") == 0
            && count(&mut c, "SELECT 1 FROM distlock.running_tasks") == 0
    });
    stop.store(true, Ordering::Relaxed);
    for worker in fleet {
        worker.join().expect("fleet worker");
    }
    assert_eq!(count(&mut c, "SELECT 1 FROM results"), 40, "one result per slot");
    assert_eq!(count(&mut c, "SELECT DISTINCT task_id FROM results"), 40);
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'completed'"), 40);
    assert!(
        count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'abandoned'") >= 1,
        "the killed client's claim was recovered"
    );
}
