//! Unique jobs under concurrent producers: however many enqueue the same
//! key at once, one job is queued and every producer gets its id.

use std::sync::{Arc, Barrier};
use std::thread;
use std::time::Duration;

use crate::support::*;

const PRODUCERS: usize = 16;

const ENQUEUE_SAME_KEY: &str =
    "SELECT distlock.enqueue_task('report', jsonb_build_object('by', $1::text), p_queue => 'reports', \
                                  p_unique_key => 'daily')";

/// Sixteen producers, each in its own transaction, wait behind a lock the
/// test holds and enqueue the same key the moment it lets go. Three rounds,
/// each after the previous round's job completed (which frees the key).
#[test]
fn sixteen_producers_enqueueing_one_key_at_once_queue_one_job() {
    let db = fresh_db("unique_jobs_race");
    let mut gate = connect(&db);
    for round in 0..3 {
        gate.batch_execute("SELECT pg_advisory_lock(2424)").expect("close the gate");
        let ready = Arc::new(Barrier::new(PRODUCERS + 1));
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|i| {
                let (db, ready) = (db.clone(), ready.clone());
                thread::spawn(move || {
                    let mut c = connect_to(primary_port(), &db, &format!("producer-{i}"));
                    let mut tx = c.transaction().expect("begin");
                    ready.wait();
                    tx.batch_execute("SELECT pg_advisory_lock_shared(2424)").expect("pass the gate");
                    let id: i64 = tx.query_one(ENQUEUE_SAME_KEY, &[&format!("producer-{i}")]).expect("enqueue").get(0);
                    tx.batch_execute("SELECT pg_advisory_unlock_shared(2424)").expect("unlock");
                    tx.commit().expect("commit");
                    id
                })
            })
            .collect();
        ready.wait();
        // Every producer waits at the gate before it opens.
        eventually("sixteen producers at the gate", Duration::from_secs(30), || {
            count(
                &mut gate,
                "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 2424 AND NOT granted",
            ) == PRODUCERS as i64
        });
        gate.batch_execute("SELECT pg_advisory_unlock(2424)").expect("open the gate");
        let ids: Vec<i64> = producers.into_iter().map(|p| p.join().expect("producer")).collect();
        let jobs = count(&mut gate, "SELECT 1 FROM distlock.jobs WHERE unique_key = 'daily' AND status = 'pending'");
        assert_eq!(jobs, 1, "round {round}: one pending job for the key");
        let queued: i64 = gate
            .query_one("SELECT id FROM distlock.jobs WHERE unique_key = 'daily' AND status = 'pending'", &[])
            .expect("the job")
            .get(0);
        assert!(ids.iter().all(|id| *id == queued), "round {round}: every producer got the queued job's id: {ids:?}");
        let done: bool = gate
            .query_one(
                "SELECT distlock.complete_task(task_id, 'w', attempts) \
                   FROM distlock.consume_task('w', p_queues => ARRAY['reports'])",
                &[],
            )
            .expect("complete")
            .get(0);
        assert!(done, "round {round}: the job completed");
    }
    let total = count(&mut gate, "SELECT 1 FROM distlock.jobs WHERE unique_key = 'daily'");
    assert_eq!(total, 3, "one job per round");
}

/// A producer whose key is held by an uncommitted job waits for that
/// transaction: it gets the job's id when it commits, and queues its own
/// when it rolls back.
#[test]
fn a_producer_waits_for_an_uncommitted_job_with_its_key() {
    let db = fresh_db("unique_jobs_uncommitted");
    for commit in [true, false] {
        let mut first = connect(&db);
        let mut tx = first.transaction().expect("begin");
        let first_id: i64 = tx.query_one(ENQUEUE_SAME_KEY, &[&"first"]).expect("first enqueue").get(0);
        let second = {
            let db = db.clone();
            thread::spawn(move || {
                let mut c = connect_to(primary_port(), &db, "second-producer");
                c.query_one(ENQUEUE_SAME_KEY, &[&"second"]).expect("second enqueue").get::<_, i64>(0)
            })
        };
        let mut watcher = connect(&db);
        eventually("the second producer waits for the first", Duration::from_secs(30), || {
            count(
                &mut watcher,
                "SELECT 1 FROM pg_stat_activity WHERE application_name = 'second-producer' \
                    AND wait_event_type = 'Lock' AND wait_event = 'transactionid'",
            ) == 1
        });
        if commit {
            tx.commit().expect("commit");
        } else {
            tx.rollback().expect("rollback");
        }
        let second_id = second.join().expect("second producer");
        let payloads: Vec<String> = watcher
            .query(
                "SELECT payload->>'by' FROM distlock.jobs WHERE unique_key = 'daily' AND status = 'pending'",
                &[],
            )
            .expect("jobs")
            .iter()
            .map(|row| row.get(0))
            .collect();
        if commit {
            assert_eq!(second_id, first_id, "the second producer got the committed job's id");
            assert_eq!(payloads, ["first"]);
        } else {
            assert_ne!(second_id, first_id, "the rolled-back job's id is not handed out");
            assert_eq!(payloads, ["second"], "the second producer queued its own job");
        }
        watcher.batch_execute("DELETE FROM distlock.task_queue").expect("clean up");
    }
}
