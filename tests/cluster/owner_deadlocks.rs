//! Deadlocks across a client's connections (issue 47, item 2): each owner
//! (`distlock.owner`) holds one lock on one connection and waits for
//! another's on a second connection, which no backend-level detector sees.
//! Exactly one waiter, the one whose wait began last, gets 40P01 after
//! deadlock_timeout; the others get their locks once it lets go.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::support::*;

const DEADLOCK_TIMEOUT_MS: u64 = 100;

/// A connection of `owner`, with a short deadlock_timeout.
fn owner_conn(db: &str, owner: &str) -> Client {
    let mut c = connect(db);
    c.batch_execute(&format!(
        "SET distlock.owner = '{owner}'; SET deadlock_timeout = '{DEADLOCK_TIMEOUT_MS}ms'; \
         SET lock_timeout = '20s'" // a missed deadlock fails the test (55P03) instead of hanging it
    ))
    .expect("set owner");
    c
}

fn lock(c: &mut Client, name: &str) {
    assert_eq!(
        scalar(c, &format!("SELECT distlock.lock('{name}')")).as_deref(),
        Some("t"),
        "lock {name}"
    );
}

/// `owner` waits for `name` on a new connection, in a thread: its outcome
/// (the SQLSTATE of its error, or "granted") and the connection.
fn wait_for(db: &str, owner: &str, name: &str) -> JoinHandle<(String, Client)> {
    outcome_in_thread(owner_conn(db, owner), format!("SELECT distlock.lock('{name}')"))
}

/// Runs `sql` on `c` in a thread: "granted" or the SQLSTATE of its error,
/// with the connection.
pub(crate) fn outcome_in_thread(mut c: Client, sql: String) -> JoinHandle<(String, Client)> {
    std::thread::spawn(move || {
        let outcome = match c.simple_query(&sql) {
            Ok(_) => "granted".to_string(),
            Err(e) => e.code().map(|s| s.code().to_string()).unwrap_or_else(|| e.to_string()),
        };
        (outcome, c)
    })
}

/// Waits until exactly `n` backends of `db` wait for an advisory lock.
fn waiting(c: &mut Client, db: &str, n: i64) {
    advisory_waits(c, db, |waits| waits == n)
}

/// Waits (10 s at most) until the number of backends of `db` waiting for
/// an advisory lock satisfies `enough`.
pub(crate) fn advisory_waits(c: &mut Client, db: &str, enough: impl Fn(i64) -> bool) {
    eventually("the waits to queue", Duration::from_secs(10), || {
        enough(count(
            c,
            &format!(
                "SELECT 1 FROM pg_catalog.pg_locks l JOIN pg_catalog.pg_database d ON d.oid = l.database \
                  WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = '{db}'"
            ),
        ))
    })
}

/// `owners` each hold lock i on one connection and then wait for lock
/// i+1 (mod n) on another, in that order: the last wait closes the cycle.
/// Returns the outcomes in order and how long the victim waited.
fn cycle_of(db: &str, owners: usize, tag: &str) -> (Vec<String>, Duration) {
    let names: Vec<String> = (0..owners).map(|i| format!("{tag}-lock-{i}")).collect();
    let mut holders: Vec<Client> = (0..owners)
        .map(|i| {
            let mut c = owner_conn(db, &format!("{tag}-owner-{i}"));
            lock(&mut c, &names[i]);
            c
        })
        .collect();
    let mut watch = connect(db);
    let mut waits = Vec::new();
    for i in 0..owners - 1 {
        waits.push(wait_for(db, &format!("{tag}-owner-{i}"), &names[i + 1]));
        waiting(&mut watch, db, i as i64 + 1);
    }
    let started = Instant::now();
    let last = wait_for(db, &format!("{tag}-owner-{}", owners - 1), &names[0]);
    let (outcome, _) = last.join().expect("the last waiter");
    let victim_waited = started.elapsed();
    let mut outcomes: Vec<String> = Vec::new();
    // The victim's owner gives its lock back (as a client does on Deadlock):
    // the others then get theirs, one after the other.
    holders[owners - 1]
        .batch_execute(&format!("SELECT distlock.unlock('{}')", names[owners - 1]))
        .expect("unlock");
    for (i, wait) in waits.into_iter().enumerate().rev() {
        let (o, _) = wait.join().expect("a waiter");
        outcomes.insert(0, o);
        holders[i]
            .batch_execute(&format!("SELECT distlock.unlock('{}')", names[i]))
            .expect("unlock");
    }
    outcomes.push(outcome);
    (outcomes, victim_waited)
}

#[test]
fn a_two_owner_inversion_across_connections_has_exactly_one_victim() {
    let db = fresh_db("owner_deadlock_two");
    let (outcomes, waited) = cycle_of(&db, 2, "two");
    assert_eq!(
        outcomes,
        ["granted", "40P01"],
        "the later waiter is the one victim"
    );
    assert!(
        waited < Duration::from_millis(DEADLOCK_TIMEOUT_MS) + Duration::from_secs(1),
        "found within deadlock_timeout plus a second, took {waited:?}"
    );
}

#[test]
fn a_three_owner_cycle_across_connections_has_exactly_one_victim() {
    let db = fresh_db("owner_deadlock_three");
    let (outcomes, _) = cycle_of(&db, 3, "three");
    assert_eq!(outcomes, ["granted", "granted", "40P01"]);
}

#[test]
fn fifty_inversions_in_a_row_each_have_one_victim_and_none_hangs() {
    let db = fresh_db("owner_deadlock_loop");
    let runs: usize = std::env::var("DISTLOCK_DEADLOCK_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(50);
    for run in 0..runs {
        let owners = 2 + run % 2;
        let (outcomes, _) = cycle_of(&db, owners, &format!("loop{run}"));
        assert_eq!(
            outcomes.iter().filter(|o| *o == "40P01").count(),
            1,
            "run {run}: {outcomes:?}"
        );
        assert_eq!(
            outcomes.iter().filter(|o| *o == "granted").count(),
            owners - 1,
            "run {run}: {outcomes:?}"
        );
    }
}

#[test]
fn the_victims_error_names_its_owner_and_lock_only() {
    let db = fresh_db("owner_deadlock_message");
    let mut a = owner_conn(&db, "msg-a");
    let mut b = owner_conn(&db, "msg-b");
    lock(&mut a, "msg-x");
    lock(&mut b, "msg-y");
    let mut watch = connect(&db);
    let first = wait_for(&db, "msg-a", "msg-y");
    waiting(&mut watch, &db, 1);
    let mut last = owner_conn(&db, "msg-b");
    let err = last
        .query_one("SELECT distlock.lock('msg-x')", &[])
        .expect_err("the victim");
    let db_error = err.as_db_error().expect("a server error");
    assert_eq!(db_error.code().code(), "40P01");
    assert!(
        db_error.message().contains("owner \"msg-b\"")
            && db_error.message().contains("lock \"msg-x\""),
        "{}",
        db_error.message()
    );
    assert!(
        !db_error.message().contains("msg-a") && !db_error.message().contains("msg-y"),
        "{}",
        db_error.message()
    );
    b.batch_execute("SELECT distlock.unlock('msg-y')")
        .expect("unlock");
    assert_eq!(first.join().expect("first").0, "granted");
}

#[test]
fn waits_without_a_cycle_are_left_alone_and_time_out_as_asked() {
    let db = fresh_db("owner_deadlock_none");
    let mut a = owner_conn(&db, "none-a");
    lock(&mut a, "none-x");
    // Another owner waits (bounded) for it, well past deadlock_timeout: a
    // plain wait, no victim.
    let mut b = owner_conn(&db, "none-b");
    let started = Instant::now();
    assert_eq!(
        scalar(&mut b, "SELECT distlock.lock('none-x', '700 ms')").as_deref(),
        Some("f")
    );
    assert!(started.elapsed() >= Duration::from_millis(700));
    // The same owner waiting on its other connection for a lock it holds is
    // a deadlock (an owner is one thread of control).
    let mut a2 = owner_conn(&db, "none-a");
    let err = a2
        .query_one("SELECT distlock.lock('none-x')", &[])
        .expect_err("self-deadlock");
    assert_eq!(err.code().map(|c| c.code()), Some("40P01"));
    // Nothing of the cancel is left over: the next statements run.
    assert_eq!(scalar(&mut a2, "SELECT 1").as_deref(), Some("1"));
}

#[test]
fn a_cycle_of_plain_backends_is_the_servers_own_deadlock_with_one_victim() {
    let db = fresh_db("owner_deadlock_backends");
    let mut a = connect(&db);
    let mut b = connect(&db);
    for c in [&mut a, &mut b] {
        c.batch_execute(&format!(
            "SET deadlock_timeout = '{DEADLOCK_TIMEOUT_MS}ms'; SET lock_timeout = '20s'"
        ))
        .expect("set");
    }
    lock(&mut a, "be-x");
    lock(&mut b, "be-y");
    let wait = |mut c: Client, name: &'static str| {
        std::thread::spawn(move || {
            let r = c.query_one("SELECT distlock.lock($1::text)", &[&name]);
            (
                r.err()
                    .and_then(|e| e.code().map(|s| s.code().to_string()))
                    .unwrap_or_else(|| "granted".into()),
                c,
            )
        })
    };
    let first = wait(a, "be-y");
    let mut watch = connect(&db);
    waiting(&mut watch, &db, 1);
    let second = wait(b, "be-x");
    // Whichever is the victim ends first; its session lets go of its lock.
    let mut pending = vec![first, second];
    let mut outcomes = Vec::new();
    while !pending.is_empty() {
        let done = pending.iter().position(|h| h.is_finished());
        match done {
            Some(i) => {
                let (outcome, mut c) = pending.remove(i).join().expect("waiter");
                c.batch_execute("SELECT distlock.unlock_all()")
                    .expect("unlock");
                outcomes.push(outcome);
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    outcomes.sort();
    assert_eq!(
        outcomes,
        ["40P01".to_string(), "granted".to_string()],
        "one victim, from the server's own detector"
    );
}

#[test]
fn a_hold_dropped_by_discard_all_fails_no_one() {
    // A pooler resets a connection (DISCARD ALL drops its locks and its
    // owner) while the shared table still lists its hold: the suspicion it
    // raises must not be taken for a deadlock.
    let db = fresh_db("owner_deadlock_discard");
    let mut stale = owner_conn(&db, "dsc-a");
    lock(&mut stale, "dsc-x");
    stale.batch_execute("DISCARD ALL").expect("discard");
    let mut c = owner_conn(&db, "dsc-c");
    lock(&mut c, "dsc-x"); // the real holder now
    let mut b = owner_conn(&db, "dsc-b");
    lock(&mut b, "dsc-y");
    let mut watch = connect(&db);
    let a_waits = wait_for(&db, "dsc-a", "dsc-y"); // owner a (as the table still has it) waits for b
    waiting(&mut watch, &db, 1);
    let b_waits = wait_for(&db, "dsc-b", "dsc-x"); // b waits for x: held by c, listed for a too
    waiting(&mut watch, &db, 2);
    // Time for the watch to check, several times (there is no event to wait
    // for: the point is that nothing happens).
    std::thread::sleep(Duration::from_millis(5 * DEADLOCK_TIMEOUT_MS));
    c.batch_execute("SELECT distlock.unlock('dsc-x')").expect("unlock x");
    let (b_outcome, mut b2) = b_waits.join().expect("b");
    assert_eq!(b_outcome, "granted", "a stale hold made a victim");
    b2.batch_execute("SELECT distlock.unlock_all()").expect("unlock");
    b.batch_execute("SELECT distlock.unlock('dsc-y')").expect("unlock y");
    assert_eq!(a_waits.join().expect("a").0, "granted");
}
