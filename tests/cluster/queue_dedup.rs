//! Dedup windows (issue 49, item 6): with `p_unique_for`, a job completed
//! within the window still holds its unique key, whatever producers race it
//! and whenever the holder completes among them.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

const PRODUCERS: usize = 16;

/// Sixteen producers enqueue one key with a window, in a loop, while the job
/// holding it is claimed and completed in their midst: every call, before
/// the completion, while it commits and after it, gets the holder's id, and
/// no second job is ever queued.
#[test]
fn sixteen_producers_racing_a_completion_all_get_the_holder() {
    let db = fresh_db("dedup_race");
    let mut c = connect(&db);
    let enqueue = "SELECT distlock.enqueue_task('sync', p_queue => 'dedup', p_unique_key => 'account:7', \
                                                 p_unique_for => '1 hour')";
    let holder = scalar(&mut c, enqueue).expect("holder");
    assert_eq!(
        scalar(&mut c, "SELECT task_id FROM distlock.consume_task('w', p_queues => ARRAY['dedup'])").as_deref(),
        Some(holder.as_str())
    );
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|i| {
            let (db, stop) = (db.clone(), stop.clone());
            thread::spawn(move || {
                let mut p = connect_to(primary_port(), &db, &format!("producer-{i}"));
                let mut got = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    got.push(scalar(&mut p, enqueue).expect("id"));
                }
                got
            })
        })
        .collect();
    // The producers are at it before and after the completion.
    eventually("producers to enqueue", Duration::from_secs(10), || {
        count(&mut c, "SELECT 1 FROM pg_stat_activity WHERE application_name LIKE 'producer-%' AND query LIKE '%enqueue_task%'")
            >= 4
    });
    thread::sleep(Duration::from_millis(200));
    assert_eq!(scalar(&mut c, &format!("SELECT distlock.complete_task({holder}, 'w')")).as_deref(), Some("t"));
    let after = Instant::now();
    thread::sleep(Duration::from_millis(500));
    stop.store(true, Ordering::SeqCst);
    let mut calls = 0;
    for p in producers {
        let got = p.join().expect("producer");
        calls += got.len();
        let others: Vec<_> = got.iter().filter(|id| **id != holder).collect();
        assert!(others.is_empty(), "a producer got another job than the holder {holder}: {others:?}");
    }
    assert!(calls >= PRODUCERS * 2, "the producers enqueued only {calls} times");
    assert!(after.elapsed() >= Duration::from_millis(500));
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.jobs WHERE queue = 'dedup'"), 1, "one job, completed");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.completed_jobs WHERE queue = 'dedup'"), 1);
}

/// A producer whose key's holder is completing (its completion not yet
/// committed) gets the holder's id at once, without waiting for the
/// completion (the holders are looked for before the insert), and again
/// once the completion committed (now from the archive).
#[test]
fn a_producer_racing_a_completing_holder_gets_the_holder_without_waiting() {
    let db = fresh_db("dedup_wait");
    let mut c = connect(&db);
    let enqueue = "SELECT distlock.enqueue_task('sync', p_queue => 'dedup', p_unique_key => 'k', p_unique_for => '1 hour')";
    let holder = scalar(&mut c, enqueue).expect("holder");
    let mut worker = connect(&db);
    scalar(&mut worker, "SELECT task_id FROM distlock.consume_task('w', p_queues => ARRAY['dedup'])").expect("claimed");
    worker.batch_execute(&format!("BEGIN; SELECT distlock.complete_task({holder}, 'w')")).expect("complete, open");
    let mut producer = connect_to(primary_port(), &db, "dedup-producer");
    producer.batch_execute("SET statement_timeout = '5s'").expect("timeout");
    assert_eq!(scalar(&mut producer, enqueue), Some(holder.clone()), "while the completion is open");
    worker.batch_execute("COMMIT").expect("commit the completion");
    assert_eq!(scalar(&mut producer, enqueue), Some(holder), "after it committed");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.jobs WHERE queue = 'dedup'"), 1);
}

/// Under an older snapshot a completion committed since would be missed:
/// a window is refused outside READ COMMITTED, whatever the archive holds.
#[test]
fn a_window_is_refused_outside_read_committed() {
    let db = fresh_db("dedup_isolation");
    let mut c = connect(&db);
    for level in ["REPEATABLE READ", "SERIALIZABLE"] {
        let isolation = match level {
            "SERIALIZABLE" => postgres::IsolationLevel::Serializable,
            _ => postgres::IsolationLevel::RepeatableRead,
        };
        let mut tx = c.build_transaction().isolation_level(isolation).start().expect("begin");
        let refused = tx.batch_execute("SELECT distlock.enqueue_task('sync', p_unique_key => 'k', p_unique_for => '1 hour')");
        assert_eq!(sqlstate(refused), "0A000", "{level}");
        tx.rollback().expect("rollback");
    }
    // Without a window, unique keys work there as before.
    let mut tx = c.build_transaction().isolation_level(postgres::IsolationLevel::RepeatableRead).start().expect("begin");
    tx.batch_execute("SELECT distlock.enqueue_task('sync', p_unique_key => 'k')").expect("enqueue");
    tx.commit().expect("commit");
}
