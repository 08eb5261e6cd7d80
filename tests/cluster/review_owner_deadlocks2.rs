//! Second review of owner-level deadlock detection (branch owner-deadlocks
//! at ac70150): each test here fails on that commit.
//!
//! - a hold the proof marked stale stays stale after its connection takes
//!   the key again (owners::took publishes only a (key, mode)'s first hold,
//!   and its count still includes the hold DISCARD ALL dropped): a real
//!   deadlock through that hold is never found, and both owners wait until
//!   their lock_timeout.

use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::owner_deadlocks::{advisory_waits, outcome_in_thread};
use crate::review_owner_deadlocks::conn;
use crate::support::*;

fn lock(c: &mut Client, key: i64) {
    assert_eq!(
        scalar(c, &format!("SELECT distlock.lock({key}::bigint)")).as_deref(),
        Some("t"),
        "lock {key}"
    );
}

fn unlock(c: &mut Client, key: i64) {
    assert_eq!(
        scalar(c, &format!("SELECT distlock.unlock({key}::bigint)")).as_deref(),
        Some("t"),
        "unlock {key}"
    );
}

/// Runs `sql` on `c` in a thread: "granted" or the SQLSTATE, with the connection.
fn in_thread(c: Client, sql: String) -> JoinHandle<(String, Client)> {
    outcome_in_thread(c, sql)
}

fn waiting(c: &mut Client, db: &str, n: i64) {
    advisory_waits(c, db, |waits| waits >= n)
}

/// Owner o1's connection a1 takes K1; a pooler's DISCARD ALL drops it (the
/// owner table still lists it). While someone else (z) holds K1, o2's
/// waiter for K1 is suspected through that listing (o1's a2 waits for o2's
/// K2): the proof finds no cycle and marks a1's listing stale, as designed.
/// Everyone lets go. Then the next client of a1 (owner o1 again) takes K1
/// for real: owners::took finds the (K1, exclusive) count it kept from
/// before DISCARD ALL, counts 2, and does not publish, so the slot stays
/// at the generation marked stale. The same inversion, now a real deadlock
/// (o1 holds K1 and waits for K2, o2 holds K2 and waits for K1), is never
/// suspected: nobody gets 40P01, both wait until lock_timeout.
#[test]
fn review2_a_hold_taken_again_after_discard_all_is_not_left_stale() {
    let db = fresh_db("rv2_owner_stale_retaken");
    let (k1, k2) = (9101_i64, 9102_i64);
    let set = "SET deadlock_timeout = '100ms'; SET lock_timeout = '8s'";
    let mut watch = connect(&db);

    let mut a1 = conn(&db, Some("rv2-o1"), "");
    lock(&mut a1, k1);
    a1.batch_execute("DISCARD ALL").expect("discard all");
    let mut z = conn(&db, None, "");
    lock(&mut z, k1);
    let mut b1 = conn(&db, Some("rv2-o2"), "");
    lock(&mut b1, k2);
    let a2 = in_thread(
        conn(&db, Some("rv2-o1"), set),
        format!("SELECT distlock.lock({k2}::bigint)"),
    );
    waiting(&mut watch, &db, 1);
    std::thread::sleep(Duration::from_millis(200));
    let b2 = in_thread(
        conn(&db, Some("rv2-o2"), set),
        format!("SELECT distlock.lock({k1}::bigint)"),
    );
    waiting(&mut watch, &db, 2);
    // b2's first check (100 ms) suspects through a1's listing; its proof
    // marks the listing stale.
    std::thread::sleep(Duration::from_millis(1000));
    unlock(&mut z, k1);
    let (outcome, mut b2) = b2.join().expect("b2");
    assert_eq!(outcome, "granted", "b2 gets K1 once z lets go");
    unlock(&mut b2, k1);
    unlock(&mut b1, k2);
    let (outcome, mut a2) = a2.join().expect("a2");
    assert_eq!(outcome, "granted", "a2 gets K2 once b1 lets go");
    unlock(&mut a2, k2);

    // The pooler's next client of a1 is o1 again and takes K1 for real.
    a1.batch_execute("SET distlock.owner = 'rv2-o1'").expect("owner");
    lock(&mut a1, k1);
    lock(&mut b1, k2);
    let started = Instant::now();
    let a2 = in_thread(a2, format!("SELECT distlock.lock({k2}::bigint)"));
    waiting(&mut watch, &db, 1);
    std::thread::sleep(Duration::from_millis(200));
    let b2 = in_thread(b2, format!("SELECT distlock.lock({k1}::bigint)"));
    waiting(&mut watch, &db, 2);
    // deadlock_timeout plus a second, as documented, and slack.
    std::thread::sleep(Duration::from_millis(2500));
    let b2_done = b2.is_finished();
    let a2_done = a2.is_finished();
    // Untangle: whoever got 40P01 lets its owner's first lock go; if nobody
    // did, lock_timeout (8 s) ends both.
    let (b2_outcome, _) = b2.join().expect("b2");
    if b2_outcome == "40P01" {
        let _ = b1.batch_execute("SELECT distlock.unlock_all()");
    }
    let (a2_outcome, _) = a2.join().expect("a2");
    let _ = a1.batch_execute("SELECT distlock.unlock_all()");
    let _ = b1.batch_execute("SELECT distlock.unlock_all()");
    assert!(
        b2_done && b2_outcome == "40P01",
        "the real deadlock (o1 holds K1 on a1 and waits for K2, o2 holds K2 and waits for K1) had no victim \
         within 2.7 s: o2's waiter {b2_outcome} (done early: {b2_done}), o1's waiter {a2_outcome} \
         (done early: {a2_done}), after {:?}",
        started.elapsed()
    );
}
