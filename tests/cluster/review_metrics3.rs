//! Third review of the queue counters (branch metrics-counters, after
//! 79caf89, 3151afe and 82fcda1): breaks written as tests that fail on the
//! branch.

use std::sync::{Arc, Barrier};

use crate::support::*;

/// Enqueues one job in each of `names` queues `prefix || i` and claims them
/// all (committed), `batch` claims per statement.
fn churn(c: &mut Client, prefix: &str, names: i64, batch: i64) {
    c.batch_execute(&format!(
        "SELECT pg_catalog.count(distlock.enqueue_task('job', '{{}}', p_queue => '{prefix}' || i)) \
           FROM pg_catalog.generate_series(1, {names}) i"
    ))
    .expect("enqueue churn");
    for _ in 0..(names + batch - 1) / batch {
        c.batch_execute(&format!("SELECT pg_catalog.count(*) FROM distlock.consume_tasks({batch}, 'w', '1 hour')"))
            .expect("claim churn");
    }
}

/// Enqueues one job in `queue` and claims it, committed.
fn claim_one(c: &mut Client, queue: &str) {
    c.execute("SELECT distlock.enqueue_task('job', '{}', p_queue => $1)", &[&queue]).expect("enqueue");
    let claimed: i64 = c
        .query_one("SELECT pg_catalog.count(*)::bigint FROM distlock.consume_task('w', '1 hour', NULL, ARRAY[$1])", &[&queue])
        .expect("claim")
        .get(0);
    assert_eq!(claimed, 1, "a job of {queue} was claimed");
}

/// (queue, rows, claimed in all) of the queues named `prefix%`, and the
/// overflow row's claims.
fn rows_of(c: &mut Client, prefix: &str) -> (Vec<(String, i64, i64)>, i64) {
    let rows = c
        .query(
            "SELECT queue, pg_catalog.count(*)::bigint, pg_catalog.sum(claimed)::bigint \
               FROM distlock.queue_counters() WHERE queue LIKE $1 || '%' GROUP BY queue ORDER BY queue",
            &[&prefix],
        )
        .expect("queue_counters")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let overflow: i64 = c
        .query_one("SELECT COALESCE(pg_catalog.sum(claimed), 0)::bigint FROM distlock.queue_counters() WHERE queue IS NULL", &[])
        .expect("overflow")
        .get(0);
    (rows, overflow)
}

/// Restarts the primary for an empty counter table (earlier tests leave
/// every slot used), puts database `db` at its share of every partition
/// (4000 names; the default capacity keeps 32 entries per database and
/// partition), then resets its counters: half of every partition is this
/// database's reset entries, half never used.
fn at_share_then_reset(db: &str) -> Client {
    let mut c = crash_restart_primary(db);
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.queue_counters()"), 0, "an empty table after the restart");
    let c = &mut c;
    churn(c, "old.", 4000, 1000);
    assert_eq!(count(c, "SELECT 1 FROM distlock.queue_counters() WHERE queue IS NULL"), 1, "the share is reached");
    c.batch_execute("SELECT distlock.reset_queue_counters()").expect("admin reset");
    connect(db)
}

/// Break (79caf89): a database at its share takes back its own reset (or
/// idle) entry anywhere in the probe window, also past a never-used slot
/// ("even when the probe meets a free slot first"). But probe() finds a
/// queue's entry only before the first free slot ("a free slot ends a
/// lookup, as no entry is ever freed"), and that invariant no longer
/// holds: at the queue's next commit the free slot hides its entry, the
/// queue counts as new again and takes a second own reset entry (or, with
/// none left in the window, goes to the overflow row). One queue then
/// shows as two rows, each with part of its jobs, and every commit of it
/// may take one more of its database's slots.
#[test]
fn a_queue_that_took_its_own_reset_entry_finds_it_at_its_next_commit() {
    let db = fresh_db("review_metrics3_own_entry");
    let mut c = at_share_then_reset(&db);

    // Ten new queues, three jobs each, one committed claim at a time.
    for i in 0..10 {
        for _ in 0..3 {
            claim_one(&mut c, &format!("new.{i}"));
        }
    }
    let (rows, overflow) = rows_of(&mut c, "new.");
    c.batch_execute("SELECT distlock.reset_queue_counters()").expect("reset for later tests");
    let wrong: Vec<_> = rows.iter().filter(|(_, n, claimed)| (*n, *claimed) != (1, 3)).cloned().collect();
    assert!(
        wrong.is_empty() && rows.len() == 10 && overflow == 0,
        "each new queue should have one row counting its 3 claims; (queue, rows, claims) wrong: {wrong:?}, \
         {} of 10 queues shown, overflow row {overflow}",
        rows.len()
    );
}

/// The same break under concurrency: eight backends commit a claim of the
/// same new queue at once in a database at its share after a reset. The
/// partition lock orders them, yet each that meets the free slot before
/// the queue's entry takes one more entry: several rows for one queue.
#[test]
fn backends_committing_one_new_queue_at_once_share_one_entry() {
    let db = fresh_db("review_metrics3_one_queue_at_once");
    let mut c = at_share_then_reset(&db);

    let backends = 8;
    let queues = 6;
    c.batch_execute(&format!(
        "SELECT pg_catalog.count(distlock.enqueue_task('job', '{{}}', p_queue => 'same.' || q)) \
           FROM pg_catalog.generate_series(1, {queues}) q, pg_catalog.generate_series(1, {backends}) b"
    ))
    .expect("enqueue");
    for q in 0..queues {
        let queue = format!("same.{}", q + 1);
        let barrier = Arc::new(Barrier::new(backends));
        let workers: Vec<_> = (0..backends)
            .map(|_| {
                let (db, queue, barrier) = (db.clone(), queue.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut c = connect(&db);
                    let mut t = c.transaction().expect("begin");
                    let claimed: i64 = t
                        .query_one(
                            "SELECT pg_catalog.count(*)::bigint FROM distlock.consume_task('w', '1 hour', NULL, ARRAY[$1])",
                            &[&queue],
                        )
                        .expect("claim")
                        .get(0);
                    barrier.wait();
                    t.commit().expect("commit");
                    claimed
                })
            })
            .collect();
        let claimed: i64 = workers.into_iter().map(|w| w.join().expect("worker")).sum();
        assert_eq!(claimed, backends as i64, "every backend claimed one job of {queue}");
    }
    let (rows, overflow) = rows_of(&mut c, "same.");
    c.batch_execute("SELECT distlock.reset_queue_counters()").expect("reset for later tests");
    let wrong: Vec<_> = rows.iter().filter(|(_, n, claimed)| (*n, *claimed) != (1, backends as i64)).cloned().collect();
    assert!(
        wrong.is_empty() && rows.len() == queues && overflow == 0,
        "each queue committed by {backends} backends at once should have one row counting {backends} claims; \
         (queue, rows, claims) wrong: {wrong:?}, {} of {queues} queues shown, overflow row {overflow}",
        rows.len()
    );
}

/// Sets `distlock.queue_counters_capacity` with ALTER SYSTEM and restarts
/// the primary; back to the default (restarted again) when dropped, also
/// when the test fails.
struct Capacity(String);

impl Capacity {
    fn set(db: &str, capacity: i32) -> (Capacity, Client) {
        connect(db)
            .batch_execute(&format!("ALTER SYSTEM SET distlock.queue_counters_capacity = {capacity}"))
            .expect("alter system");
        let c = crash_restart_primary(db);
        (Capacity(db.to_string()), c)
    }
}

impl Drop for Capacity {
    fn drop(&mut self) {
        connect(&self.0).batch_execute("ALTER SYSTEM RESET distlock.queue_counters_capacity").expect("alter system");
        drop(crash_restart_primary(&self.0));
    }
}

/// Break (share arithmetic at a small capacity): "Each database may fill
/// at most distlock.queue_counters_database_share percent (default 50) of
/// the table, so one database cannot leave the others no room"
/// (docs/metrics.md). The share is taken per partition and rounded down to
/// at least one slot (share_limit), so with a capacity of 16 (or anything
/// up to 31 at the default share: one slot per partition) one database
/// may take every slot of the table: 100 %. A second database then counts
/// none of its queues by name.
#[test]
fn at_a_capacity_of_16_one_database_fills_at_most_its_share() {
    let a = fresh_db("review_metrics3_small_a");
    let b = fresh_db("review_metrics3_small_b");
    let (_capacity, mut c) = Capacity::set(&a, 16);
    assert_eq!(scalar(&mut c, "SHOW distlock.queue_counters_capacity").as_deref(), Some("16"));
    // The fix: a capacity under 256 is raised to 256 (16 slots a partition),
    // so a share of 50 % is 8 whole slots of each partition: 128 in all.
    churn(&mut c, "a.", 300, 300);
    let held_by_a = count(&mut c, "SELECT 1 FROM distlock.queue_counters() WHERE queue IS NOT NULL");
    let mut cb = connect(&b);
    churn(&mut cb, "b.", 16, 16);
    let held_by_b = count(&mut cb, "SELECT 1 FROM distlock.queue_counters() WHERE queue IS NOT NULL");
    assert!(
        held_by_a <= 128 && held_by_b == 16,
        "capacity 16 (raised to 256), share 50 %: database a holds {held_by_a} of the table's slots (at most 128 by \
         its share), database b, with 16 new queues, {held_by_b}"
    );
}
