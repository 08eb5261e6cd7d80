//! distlock.lock with several sessions: bounded waits, waiters woken by a
//! release, deadlocks, and the per-key telemetry in shared memory.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// Whether `pid` holds (granted) or waits for (not granted) the advisory
/// lock of `key_sql`.
fn lock_rows(client: &mut Client, pid: i32, key_sql: &str, granted: bool) -> i64 {
    count(
        client,
        &format!(
            "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND pid = {pid} \
               AND granted = {granted} AND ((classid::bigint << 32) | objid::bigint) = {key_sql}"
        ),
    )
}

/// A statement's first column as bool, or its SQLSTATE.
type Outcome = Result<Option<bool>, String>;

fn spawn_session(
    db: &str,
    name: &'static str,
) -> (thread::JoinHandle<()>, std::sync::mpsc::Sender<String>, std::sync::mpsc::Receiver<Outcome>, i32) {
    // A session on its own thread that runs the statements it is sent and
    // reports each result (first column as bool, or the SQLSTATE).
    let (to_session, statements) = std::sync::mpsc::channel::<String>();
    let (report, results) = std::sync::mpsc::channel();
    let db = db.to_string();
    let (pid_tx, pid_rx) = std::sync::mpsc::channel();
    let handle = thread::spawn(move || {
        let mut client = connect_to(primary_port(), &db, name);
        pid_tx.send(backend_pid(&mut client)).expect("pid");
        for sql in statements {
            let result = client
                .query_opt(sql.as_str(), &[])
                .map(|row| row.and_then(|r| r.try_get::<_, bool>(0).ok()))
                .map_err(|e| e.code().map(|c| c.code().to_string()).unwrap_or_else(|| e.to_string()));
            if report.send(result).is_err() {
                return;
            }
        }
    });
    let pid = pid_rx.recv().expect("session started");
    (handle, to_session, results, pid)
}

#[test]
fn lock_times_out_on_time_and_leaves_nothing_held() {
    let db = fresh_db("locks_timeout");
    let mut holder = connect(&db);
    assert!(holder.query_one("SELECT distlock.lock('busy')", &[]).expect("lock").get::<_, bool>(0));
    let mut waiter = connect(&db);
    let waiter_pid = backend_pid(&mut waiter);
    waiter.batch_execute("SET lock_timeout = '20 s'").expect("a session timeout the call overrides");

    let started = Instant::now();
    let got: bool = waiter.query_one("SELECT distlock.lock('busy', '300 ms')", &[]).expect("call").get(0);
    let waited = started.elapsed();
    assert!(!got, "held elsewhere: false");
    assert!(waited >= Duration::from_millis(300), "returned before its timeout: {waited:?}");
    assert!(waited < Duration::from_secs(5), "took far longer than its timeout: {waited:?}");
    assert_eq!(lock_rows(&mut holder, waiter_pid, "distlock.lock_id('busy')", true), 0, "not held after a timeout");
    assert_eq!(lock_rows(&mut holder, waiter_pid, "distlock.lock_id('busy')", false), 0, "not left waiting");
    let session_timeout: String = waiter.query_one("SHOW lock_timeout", &[]).expect("show").get(0);
    assert_eq!(session_timeout, "20s", "the session's lock_timeout is restored");

    // Transaction-level, inside an explicit transaction: the transaction
    // goes on after the timeout and its other work commits.
    waiter.batch_execute("CREATE TABLE after_timeout (x int)").expect("table");
    waiter.batch_execute("BEGIN").expect("begin");
    let got: bool = waiter
        .query_one("SELECT distlock.lock('busy', '50 ms', p_xact => true)", &[])
        .expect("call")
        .get(0);
    assert!(!got);
    waiter.batch_execute("INSERT INTO after_timeout VALUES (1); COMMIT").expect("transaction still usable");
    assert_eq!(count(&mut waiter, "SELECT 1 FROM after_timeout"), 1);

    // Once free, a bounded call takes it.
    assert!(holder.query_one("SELECT distlock.unlock('busy')", &[]).expect("unlock").get::<_, bool>(0));
    assert!(waiter.query_one("SELECT distlock.lock('busy', '1 s')", &[]).expect("lock").get::<_, bool>(0));
    assert_eq!(lock_rows(&mut holder, waiter_pid, "distlock.lock_id('busy')", true), 1);
}

#[test]
fn lock_waiter_shows_its_wait_and_gets_the_lock_when_the_holder_releases() {
    let db = fresh_db("locks_wakeup");
    let mut holder = connect(&db);
    holder.batch_execute("SELECT distlock.lock(77)").expect("lock");
    let mut monitor = connect(&db);
    for timeout in ["NULL", "'30 s'"] {
        let (handle, send, results, pid) = spawn_session(&db, "waiter");
        send.send(format!("SELECT distlock.lock(77, {timeout})")).expect("send");
        eventually("the waiter to queue in the lock manager", Duration::from_secs(10), || {
            lock_rows(&mut monitor, pid, "77", false) == 1
        });
        assert!(results.try_recv().is_err(), "still waiting while the lock is held");
        assert_eq!(
            scalar(&mut monitor, &format!("SELECT wait_event_type || '/' || wait_event FROM pg_stat_activity WHERE pid = {pid}")).as_deref(),
            Some("Lock/advisory"),
            "a waiter is named in pg_stat_activity by the lock manager"
        );
        holder.batch_execute("SELECT distlock.unlock(77)").expect("unlock");
        let result = results.recv_timeout(Duration::from_secs(10)).expect("woken by the release");
        assert_eq!(result, Ok(Some(true)), "timeout {timeout}");
        assert_eq!(lock_rows(&mut monitor, pid, "77", true), 1, "the waiter holds it now");
        // Hand it back for the next round.
        send.send("SELECT distlock.unlock(77)".into()).expect("send");
        assert_eq!(results.recv().expect("unlocked"), Ok(Some(true)));
        holder.batch_execute("SELECT distlock.lock(77)").expect("lock again");
        drop(send);
        handle.join().expect("session ends");
    }
}

#[test]
fn lock_deadlock_between_two_calls_is_detected() {
    let db = fresh_db("locks_deadlock");
    let (a_handle, a, a_results, a_pid) = spawn_session(&db, "a");
    let (b_handle, b, b_results, _) = spawn_session(&db, "b");
    a.send("SELECT distlock.lock('d1')".into()).expect("send");
    assert_eq!(a_results.recv().expect("a"), Ok(Some(true)));
    b.send("SET deadlock_timeout = '100ms'".into()).expect("send");
    assert_eq!(b_results.recv().expect("b").map(|_| ()), Ok(()));
    b.send("SELECT distlock.lock('d2')".into()).expect("send");
    assert_eq!(b_results.recv().expect("b"), Ok(Some(true)));

    a.send("SELECT distlock.lock('d2')".into()).expect("send");
    let mut monitor = connect(&db);
    eventually("a to wait for d2", Duration::from_secs(10), || {
        lock_rows(&mut monitor, a_pid, "distlock.lock_id('d2')", false) == 1
    });
    // b closes the cycle through the bounded path; its shorter
    // deadlock_timeout makes it the one the detector picks.
    b.send("SELECT distlock.lock('d1', '30 s')".into()).expect("send");
    assert_eq!(b_results.recv_timeout(Duration::from_secs(20)).expect("b"), Err("40P01".to_string()));
    // b still holds d2 (session lock); once it lets go, a gets it.
    b.send("SELECT distlock.unlock('d2')".into()).expect("send");
    assert_eq!(b_results.recv().expect("b"), Ok(Some(true)));
    assert_eq!(a_results.recv_timeout(Duration::from_secs(10)).expect("a"), Ok(Some(true)));
    drop((a, b));
    a_handle.join().expect("a");
    b_handle.join().expect("b");
}

fn stats_row(client: &mut Client, name: &str) -> postgres::Row {
    client
        .query_one(
            "SELECT acquisitions, failed_tries, timeouts, waits, \
                    extract(epoch FROM max_wait)::float8, current_holders, \
                    longest_current_hold IS NOT NULL, name \
               FROM distlock.lock_stats WHERE key = distlock.lock_id($1)",
            &[&name],
        )
        .unwrap_or_else(|e| panic!("lock_stats row of {name}: {e}"))
}

#[test]
fn lock_stats_count_tries_timeouts_waits_and_holds() {
    let db = fresh_db("locks_stats");
    let mut holder = connect(&db);
    holder.batch_execute("SELECT distlock.reset_lock_stats(); SELECT distlock.lock('stats-key')").expect("lock");
    let mut other = connect(&db);
    assert!(!other.query_one("SELECT distlock.try_lock('stats-key')", &[]).expect("try").get::<_, bool>(0));
    assert!(!other.query_one("SELECT distlock.lock('stats-key', '150 ms')", &[]).expect("lock").get::<_, bool>(0));

    let (handle, send, results, pid) = spawn_session(&db, "stats-waiter");
    send.send("SELECT distlock.lock('stats-key', '30 s')".into()).expect("send");
    let mut monitor = connect(&db);
    eventually("the waiter to queue", Duration::from_secs(10), || {
        lock_rows(&mut monitor, pid, "distlock.lock_id('stats-key')", false) == 1
    });
    holder.batch_execute("SELECT distlock.unlock('stats-key')").expect("unlock");
    assert_eq!(results.recv_timeout(Duration::from_secs(10)).expect("woken"), Ok(Some(true)));

    let row = stats_row(&mut monitor, "stats-key");
    assert_eq!(row.get::<_, i64>(0), 2, "acquisitions: the holder and the waiter");
    assert_eq!(row.get::<_, i64>(1), 1, "failed tries");
    assert_eq!(row.get::<_, i64>(2), 1, "timeouts");
    assert_eq!(row.get::<_, i64>(3), 1, "acquisitions that waited");
    assert!(row.get::<_, f64>(4) >= 0.15, "max wait includes the 150 ms timeout");
    assert_eq!(row.get::<_, i32>(5), 1, "the waiter holds it now");
    assert!(row.get::<_, bool>(6), "a current hold is shown");
    assert_eq!(row.get::<_, Option<String>>(7).as_deref(), Some("stats-key"));

    // A session that ends without unlocking stops counting as a holder.
    drop(send);
    handle.join().expect("waiter ends");
    eventually("the ended session's hold to go", Duration::from_secs(10), || {
        let row = stats_row(&mut monitor, "stats-key");
        row.get::<_, i32>(5) == 0 && !row.get::<_, bool>(6)
    });

    // Transaction-level holds end at commit.
    holder.batch_execute("BEGIN; SELECT distlock.lock('stats-key', p_xact => true)").expect("xact lock");
    assert_eq!(stats_row(&mut monitor, "stats-key").get::<_, i32>(5), 1);
    holder.batch_execute("COMMIT").expect("commit");
    assert_eq!(stats_row(&mut monitor, "stats-key").get::<_, i32>(5), 0);

    let reset: i64 = monitor.query_one("SELECT distlock.reset_lock_stats()", &[]).expect("reset").get(0);
    assert!(reset >= 1);
    assert_eq!(count(&mut monitor, "SELECT 1 FROM distlock.lock_stats WHERE key = distlock.lock_id('stats-key')"), 0);
}

#[test]
fn lock_calls_work_without_preload_and_telemetry_says_why_not() {
    let db = fresh_db_on(plain_port(), "locks_plain");
    let mut a = connect_to(plain_port(), &db, "a");
    let mut b = connect_to(plain_port(), &db, "b");
    assert!(a.query_one("SELECT distlock.lock('plain')", &[]).expect("lock").get::<_, bool>(0));
    assert!(!b.query_one("SELECT distlock.lock('plain', '20 ms')", &[]).expect("lock").get::<_, bool>(0));
    assert_eq!(sqlstate(b.query_one("SELECT count(*) FROM distlock.lock_stats", &[])), "55000");
    assert_eq!(count(&mut b, "SELECT 1 FROM distlock.advisory_locks WHERE key_name = 'plain'"), 1);
}
