//! A queue's concurrency limit under contention: however many consumers
//! claim at once, no more jobs of the queue are processing than its limit.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

const LIMIT: i64 = 3;
const CONSUMERS: usize = 16;
const JOBS: i64 = 200;

/// Each consumer, right after its claim has committed, counts the queue's
/// processing jobs (its own and everyone else's committed claims), then
/// works a little and completes. The largest count any of them saw is the
/// limit: reached, never passed.
#[test]
fn sixteen_consumers_never_have_more_than_the_limit_processing() {
    let db = fresh_db("queue_limit_contention");
    connect(&db)
        .batch_execute(&format!(
            "SELECT distlock.set_queue_limit('limited', {LIMIT}); \
             SELECT distlock.enqueue_task('job', p_queue => 'limited') FROM generate_series(1, {JOBS});"
        ))
        .expect("limited queue");
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|i| {
            let db = db.clone();
            thread::spawn(move || {
                let worker = format!("consumer-{i}");
                let mut c = connect_to(primary_port(), &db, &worker);
                let (mut peak, mut completed) = (0_i64, 0_i64);
                let deadline = Instant::now() + Duration::from_secs(120);
                while Instant::now() < deadline {
                    let claimed = c
                        .query(
                            "SELECT task_id, attempts FROM distlock.consume_tasks(2, $1, p_wait => '50 milliseconds', \
                                                                                  p_queues => ARRAY['limited'])",
                            &[&worker],
                        )
                        .expect("claim");
                    if claimed.is_empty() {
                        let left = count(&mut c, "SELECT 1 FROM distlock.jobs WHERE status <> 'completed'");
                        if left == 0 {
                            break;
                        }
                        continue;
                    }
                    let processing: i64 = c
                        .query_one("SELECT count(*) FROM distlock.jobs WHERE status = 'processing'", &[])
                        .expect("count")
                        .get(0);
                    peak = peak.max(processing);
                    // Work, so that claims overlap.
                    thread::sleep(Duration::from_millis(5));
                    for job in &claimed {
                        let (id, attempt): (i64, i32) = (job.get(0), job.get(1));
                        let done: bool = c
                            .query_one("SELECT distlock.complete_task($1, $2, $3)", &[&id, &worker, &attempt])
                            .expect("complete")
                            .get(0);
                        assert!(done, "job {id} was not ours to complete");
                        completed += 1;
                    }
                }
                (peak, completed)
            })
        })
        .collect();
    let results: Vec<(i64, i64)> = consumers.into_iter().map(|h| h.join().expect("consumer")).collect();
    let peak = results.iter().map(|r| r.0).max().unwrap_or(0);
    let completed: i64 = results.iter().map(|r| r.1).sum();
    assert_eq!(completed, JOBS, "every job completed once");
    assert!(peak <= LIMIT, "{peak} jobs of a queue limited to {LIMIT} were processing at once");
    assert_eq!(peak, LIMIT, "the consumers never reached the limit: the test proves nothing");
}

/// A consumer waiting on a full queue looks again by itself (no completion
/// wakes it) and takes the room a completion makes well before its wait
/// runs out, however long it has already found the queue full.
#[test]
fn a_consumer_waiting_on_a_full_queue_takes_the_room_a_completion_makes() {
    let db = fresh_db("queue_limit_room");
    let mut holder = connect_to(primary_port(), &db, "holder");
    holder
        .batch_execute(
            "SELECT distlock.set_queue_limit('one', 1); \
             SELECT distlock.enqueue_task('job', p_queue => 'one') FROM generate_series(1, 2);",
        )
        .expect("queue limited to one");
    let held: (i64, i32) = holder
        .query_one("SELECT task_id, attempts FROM distlock.consume_task('holder', p_queues => ARRAY['one'])", &[])
        .map(|row| (row.get(0), row.get(1)))
        .expect("the first job");
    let waiter_db = db.clone();
    let waiter = thread::spawn(move || {
        let mut c = connect_to(primary_port(), &waiter_db, "waiter");
        let started = Instant::now();
        let got = c
            .query(
                "SELECT task_id FROM distlock.consume_task('waiter', p_wait => '20 seconds', p_queues => ARRAY['one'])",
                &[],
            )
            .expect("wait for room");
        (got.len(), started.elapsed())
    });
    eventually("the waiter waits in the server", Duration::from_secs(10), || {
        let sql = "SELECT 1 FROM pg_stat_activity WHERE application_name = 'waiter' AND wait_event_type = 'Extension'";
        count(&mut holder, sql) == 1
    });
    // Not a synchronization: time for the waiter's looks at the full queue to space out.
    thread::sleep(Duration::from_millis(1500));
    assert!(!waiter.is_finished(), "the waiter left while the queue was full");
    let done: bool = holder
        .query_one("SELECT distlock.complete_task($1, 'holder', $2)", &[&held.0, &held.1])
        .expect("complete")
        .get(0);
    assert!(done, "the holder's job completes");
    let (got, elapsed) = waiter.join().expect("waiter");
    assert_eq!(got, 1, "the waiter took the second job");
    assert!(elapsed < Duration::from_secs(10), "the waiter looked again only after {elapsed:?}");
}
