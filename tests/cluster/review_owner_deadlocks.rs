//! Review of owner-level deadlock detection (branch owner-deadlocks,
//! d3f70fe): each test here fails on that commit.
//!
//! - a grant that races the watch's cancel leaves an untracked second hold
//!   (the lock is leaked after the caller's one unlock);
//! - a stale suspicion (a hold dropped with pg_advisory_unlock_all, or a
//!   wait left published after an error) takes the waiter out of the
//!   lock's queue at every tick, not once: later arrivals overtake it, and
//!   the caller's lock_timeout is restarted each time and never fires;
//! - a cycle that runs through the lock's queue order (a shared request
//!   queued behind an exclusive waiter) is never found: no victim, all hang.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::owner_deadlocks::advisory_waits;
use crate::support::*;

/// A connection with `owner` (None: no owner) and settings `set`.
pub(crate) fn conn(db: &str, owner: Option<&str>, set: &str) -> Client {
    let mut c = connect(db);
    if let Some(owner) = owner {
        c.batch_execute(&format!("SET distlock.owner = '{owner}'"))
            .expect("owner");
    }
    c.batch_execute(set).expect("settings");
    c
}

fn lock(c: &mut Client, sql_key: &str) {
    assert_eq!(
        scalar(c, &format!("SELECT distlock.lock({sql_key})")).as_deref(),
        Some("t"),
        "lock {sql_key}"
    );
}

/// Runs `sql` on `c` in a thread: "granted" or the SQLSTATE, with when it
/// ended and the connection.
fn in_thread(mut c: Client, sql: String) -> JoinHandle<(String, Instant, Client)> {
    std::thread::spawn(move || {
        let outcome = match c.simple_query(&sql) {
            Ok(_) => "granted".to_string(),
            Err(e) => e
                .code()
                .map(|s| s.code().to_string())
                .unwrap_or_else(|| e.to_string()),
        };
        (outcome, Instant::now(), c)
    })
}

/// Waits until at least `n` backends of `db` wait for an advisory lock.
fn waiting(c: &mut Client, db: &str, n: i64) {
    advisory_waits(c, db, |waits| waits >= n)
}

/// Joins the waiters, each finished one letting go of its locks before
/// the others are joined (a stale-suspected waiter never times out).
fn settle(mut pending: Vec<JoinHandle<(String, Instant, Client)>>) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pending.is_empty() && Instant::now() < deadline {
        match pending.iter().position(|h| h.is_finished()) {
            Some(i) => {
                let (_, _, mut c) = pending.remove(i).join().expect("waiter");
                let _ = c.batch_execute("SELECT distlock.unlock_all()");
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn signal(pid: i32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// A waiter granted its lock at the moment the watch cancels its wait (here
/// the window is widened by stopping the waiter; in production it is the
/// time between the holder's LockRelease, which grants, and its
/// publish_holds): LockErrorCleanup records the grant, the session lock
/// survives the internal subtransaction's rollback, the proof finds no
/// cycle, and the wait is taken up again: LockAcquire finds the lock held
/// and counts a second hold that pg_distlock does not track. The caller's
/// one distlock.unlock leaves the lock held for ever.
#[test]
fn review_a_grant_racing_the_watch_cancel_leaks_no_hold() {
    let db = fresh_db("rv_owner_grant_race");
    let key = 4242_i64;
    let mut holder = conn(&db, Some("race-o1"), "SET lock_timeout = '20s'");
    lock(&mut holder, &format!("{key}::bigint"));
    let mut w = conn(
        &db,
        Some("race-o1"),
        "SET deadlock_timeout = '2s'; SET lock_timeout = '20s'",
    );
    let wpid = backend_pid(&mut w);
    let started = Instant::now();
    let wait = in_thread(w, format!("SELECT distlock.lock({key}::bigint)"));
    let mut watch = connect(&db);
    waiting(&mut watch, &db, 1);
    signal(wpid, "-STOP");
    // The holder lets go (plain unlock: the owner table still lists the
    // hold, as it does between LockRelease and publish_holds); the lock
    // manager grants the stopped waiter.
    let released = scalar(&mut holder, &format!("SELECT pg_advisory_unlock({key}::bigint)"));
    // The watch's first tick (deadlock_timeout) comes due while it is stopped.
    std::thread::sleep(Duration::from_millis(2600).saturating_sub(started.elapsed()));
    signal(wpid, "-CONT");
    assert_eq!(released.as_deref(), Some("t"));
    let (outcome, _, mut w) = wait.join().expect("waiter");
    if outcome == "granted" {
        assert_eq!(
            scalar(&mut w, &format!("SELECT distlock.unlock({key}::bigint)")).as_deref(),
            Some("t")
        );
    }
    let held = count(
        &mut watch,
        &format!(
            "SELECT 1 FROM pg_catalog.pg_locks WHERE locktype = 'advisory' AND granted AND pid = {wpid}"
        ),
    );
    assert_eq!(
        held, 0,
        "the waiter ({outcome}) still holds the lock after its one unlock: a hold nobody tracks"
    );
    let mut other = connect(&db);
    assert_eq!(
        scalar(&mut other, &format!("SELECT distlock.try_lock({key}::bigint)")).as_deref(),
        Some("t"),
        "the lock is free for others"
    );
}

/// A connection of owner o1 took a lock and dropped it with
/// pg_advisory_unlock_all (or a pooler's DISCARD ALL): the owner table still
/// lists the hold. Another connection of o1 waiting for that key (held by
/// someone else) is suspected at every tick; each time it leaves the queue
/// and rejoins at its end. docs/locks.md: such a suspicion "costs the waiter
/// its place in the lock's queue once". A session that queued after the
/// first lost place still overtakes it.
#[test]
fn review_a_stale_hold_costs_the_waiter_its_place_only_once() {
    let db = fresh_db("rv_owner_stale_place");
    let key = 777_i64;
    let mut stale = conn(&db, Some("stale-o1"), "");
    lock(&mut stale, &format!("{key}::bigint"));
    scalar(&mut stale, "SELECT pg_advisory_unlock_all()");
    let mut holder = conn(&db, None, "");
    lock(&mut holder, &format!("{key}::bigint"));
    let w = conn(
        &db,
        Some("stale-o1"),
        "SET deadlock_timeout = '200ms'; SET lock_timeout = '20s'",
    );
    let first = in_thread(w, format!("SELECT distlock.lock({key}::bigint)"));
    let mut watch = connect(&db);
    waiting(&mut watch, &db, 1);
    // Past the first suspicion (200 ms): its one lost place.
    std::thread::sleep(Duration::from_millis(500));
    let t = conn(&db, None, "SET lock_timeout = '20s'");
    let second = in_thread(t, format!("SELECT distlock.lock({key}::bigint)"));
    waiting(&mut watch, &db, 2);
    std::thread::sleep(Duration::from_millis(1000));
    holder
        .batch_execute(&format!("SELECT distlock.unlock({key}::bigint)"))
        .expect("unlock");
    std::thread::sleep(Duration::from_millis(1000));
    let first_done = first.is_finished();
    let second_done = second.is_finished();
    // Let the other one through, whichever got it.
    settle(vec![first, second]);
    assert!(
        first_done && !second_done,
        "the first waiter was overtaken by one that queued after its one lost place \
         (first done: {first_done}, second done: {second_done})"
    );
}

/// The same stale suspicion with the caller's lock_timeout: each re-wait is
/// a new LockAcquire whose lock_timeout starts again, so a lock_timeout
/// longer than the tick never fires (statement_timeout ends it here).
#[test]
fn review_a_stale_hold_does_not_disable_the_callers_lock_timeout() {
    let db = fresh_db("rv_owner_stale_lock_timeout");
    let key = 778_i64;
    let mut stale = conn(&db, Some("stale-lt-o1"), "");
    lock(&mut stale, &format!("{key}::bigint"));
    scalar(&mut stale, "SELECT pg_advisory_unlock_all()");
    let mut holder = conn(&db, None, "");
    lock(&mut holder, &format!("{key}::bigint"));
    let mut w = conn(
        &db,
        Some("stale-lt-o1"),
        "SET deadlock_timeout = '200ms'; SET lock_timeout = '1s'; SET statement_timeout = '5s'",
    );
    let started = Instant::now();
    let r = w.simple_query(&format!("SELECT distlock.lock({key}::bigint)"));
    let took = started.elapsed();
    assert_eq!(
        sqlstate(r),
        "55P03",
        "lock_timeout (1 s) should end the wait; it ended after {took:?}"
    );
}

/// A distlock.lock wait that ends in an error (the caller's lock_timeout
/// here; equally statement_timeout, pg_cancel_backend, the server's own
/// 40P01) leaves its wait published: owner_wait::wait calls end_wait only
/// when wait_once returns, not when it rethrows. The stale wait closes a
/// cycle for another owner's waiter, which is then suspected at every tick
/// and overtaken in the queue (and its own lock_timeout never fires).
#[test]
fn review_a_wait_ended_by_an_error_is_not_left_published() {
    let db = fresh_db("rv_owner_stale_wait");
    let (l, k) = (911_i64, 912_i64);
    let mut a1 = conn(&db, Some("sw-o1"), "");
    lock(&mut a1, &format!("{l}::bigint"));
    let mut b1 = conn(&db, Some("sw-o2"), "");
    lock(&mut b1, &format!("{k}::bigint"));
    // o1's other connection waits for K and gives up (55P03).
    let mut a2 = conn(&db, Some("sw-o1"), "SET lock_timeout = '300ms'");
    assert_eq!(
        sqlstate(a2.simple_query(&format!("SELECT distlock.lock({k}::bigint)"))),
        "55P03"
    );
    // o2 waits for L (held by o1, which waits for nothing): no cycle.
    let b2 = conn(
        &db,
        Some("sw-o2"),
        "SET deadlock_timeout = '200ms'; SET lock_timeout = '20s'",
    );
    let first = in_thread(b2, format!("SELECT distlock.lock({l}::bigint)"));
    let mut watch = connect(&db);
    waiting(&mut watch, &db, 1);
    std::thread::sleep(Duration::from_millis(500));
    let t = conn(&db, None, "SET lock_timeout = '20s'");
    let second = in_thread(t, format!("SELECT distlock.lock({l}::bigint)"));
    waiting(&mut watch, &db, 2);
    std::thread::sleep(Duration::from_millis(1000));
    a1.batch_execute(&format!("SELECT distlock.unlock({l}::bigint)"))
        .expect("unlock");
    std::thread::sleep(Duration::from_millis(1000));
    let first_done = first.is_finished();
    let second_done = second.is_finished();
    settle(vec![first, second]);
    drop(a2);
    assert!(
        first_done && !second_done,
        "o2's waiter, first in L's queue with no cycle anywhere, was overtaken \
         (first done: {first_done}, second done: {second_done}): o1's failed wait is still published"
    );
}

/// A deadlock through the lock's queue order: o1 holds A shared and waits
/// for B; o2 holds B and asks for A shared, which queues behind C's
/// exclusive request for A (PostgreSQL grants no request that conflicts
/// with one waiting ahead); C waits for o1's shared hold. Nobody can go
/// on, yet the owner graph only follows holders (a shared hold does not
/// block a shared wait) and no backend waits for a waiting backend: no
/// victim, every wait lasts until its lock_timeout.
#[test]
fn review_a_cycle_through_a_queued_exclusive_waiter_has_a_victim() {
    let db = fresh_db("rv_owner_soft_edge");
    let (a, b) = (901_i64, 902_i64);
    let set = "SET deadlock_timeout = '200ms'; SET lock_timeout = '8s'";
    let mut a1 = conn(&db, Some("soft-o1"), set);
    assert_eq!(
        scalar(&mut a1, &format!("SELECT distlock.lock({a}::bigint, p_shared => true)")).as_deref(),
        Some("t")
    );
    let mut b0 = conn(&db, Some("soft-o2"), set);
    lock(&mut b0, &format!("{b}::bigint"));
    let mut watch = connect(&db);
    let c = in_thread(conn(&db, None, set), format!("SELECT distlock.lock({a}::bigint)"));
    waiting(&mut watch, &db, 1);
    let b1 = in_thread(
        conn(&db, Some("soft-o2"), set),
        format!("SELECT distlock.lock({a}::bigint, p_shared => true)"),
    );
    waiting(&mut watch, &db, 2);
    let started = Instant::now();
    let a2 = in_thread(conn(&db, Some("soft-o1"), set), format!("SELECT distlock.lock({b}::bigint)"));
    waiting(&mut watch, &db, 3);
    // deadlock_timeout plus a second, as documented, and some slack.
    std::thread::sleep(Duration::from_millis(3000));
    let mut outcomes = Vec::new();
    let mut finished_early = 0;
    for (name, h) in [("C", c), ("o2 shared", b1), ("o1", a2)] {
        if h.is_finished() {
            finished_early += 1;
        }
        let (outcome, at, mut conn) = h.join().expect("waiter");
        outcomes.push(format!("{name}: {outcome} after {:?}", at - started));
        let _ = conn.batch_execute("SELECT distlock.unlock_all()");
        if outcome == "40P01" {
            // A victim's owner lets go of what it holds.
            if name == "o1" {
                let _ = a1.batch_execute("SELECT distlock.unlock_all()");
            } else if name == "o2 shared" {
                let _ = b0.batch_execute("SELECT distlock.unlock_all()");
            }
        }
    }
    assert!(
        finished_early >= 1 && outcomes.iter().any(|o| o.contains("40P01")),
        "no victim within 3 s of the cycle closing: {outcomes:?}"
    );
}
