//! The shared claim frontier (src/shared/claim_frontier.rs): a backend whose
//! own place fell behind starts where the other unscoped claims of the same
//! queue got to, and still claims a job the log says became runnable
//! before that place.

use crate::review_46_7::{claim_counting_reads, enqueue};
use crate::support::*;

const CLAIM_ONE: &str = "SELECT task_id FROM distlock.consume_task('a', p_queues => ARRAY['frontier'])";

/// a's own place is behind the 1,000 jobs b claimed since (their index
/// entries stay: a snapshot is held); a's next claim starts at b's end
/// rather than stepping over them. Then a job made runnable before that end
/// (an earlier run_after) is the next a claims: the log vouches for the
/// frontier only with what it got since.
#[test]
fn claim_frontier_a_backend_behind_starts_where_the_others_got_to() {
    let db = fresh_db("claim_frontier_behind");
    let mut producer = connect(&db);
    producer
        .batch_execute("SELECT count(distlock.enqueue_task('job', '{}', now() - interval '1 minute', 0, 5, 'frontier')) FROM generate_series(1, 2000)")
        .expect("2,000 jobs");
    let mut holder = connect(&db);
    holder.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class").expect("hold a snapshot");
    let mut a = connect(&db);
    let mut b = connect(&db);
    let (first, _) = claim_counting_reads(&mut a, CLAIM_ONE);
    assert!(first.is_some(), "a's first claim");
    let taken = count(&mut b, "SELECT * FROM distlock.consume_tasks(1000, 'b', p_queues => ARRAY['frontier'])");
    assert_eq!(taken, 1000, "b's claim");
    let (next, read) = claim_counting_reads(&mut a, CLAIM_ONE);
    assert!(next.is_some_and(|id| id > first.unwrap_or_default() + 1000), "a's next job ({next:?}) is after b's");
    assert!(read < 100, "a's claim stepped over {read} index entries: it started at its own place, behind b's 1,000 jobs");

    let early = enqueue(&mut producer, "frontier", "now() - interval '1 hour'", 0);
    let (claimed, _) = claim_counting_reads(&mut a, CLAIM_ONE);
    assert_eq!(claimed, Some(early), "the job made runnable before the frontier, which the log told of");
    holder.batch_execute("ROLLBACK").expect("release the snapshot");
}

/// A scoped consumer neither uses nor moves the frontier: its claims pass
/// over jobs outside its scope, which says nothing of where an unscoped
/// claim may start.
#[test]
fn claim_frontier_a_scoped_claim_does_not_move_it() {
    let db = fresh_db("claim_frontier_scoped");
    let mut c = connect(&db);
    ensure_role(&mut c, "claim_frontier_scoped");
    c.batch_execute("SELECT distlock.grant_capability('claim_frontier_scoped', 'consumer', 'in.')")
        .expect("scoped consumer");
    // In the index: one job, then 50 out of the scope, then 50 in it.
    c.batch_execute(
        "SELECT distlock.enqueue_task('in.first', '{}', now() - interval '3 minutes', 0, 5, 'in.q'); \
         SELECT count(distlock.enqueue_task('out.job', '{}', now() - interval '2 minutes', 0, 5, 'in.q')) FROM generate_series(1, 50); \
         SELECT count(distlock.enqueue_task('in.job', '{}', now() - interval '1 minute', 0, 5, 'in.q')) FROM generate_series(1, 50)",
    )
    .expect("jobs");
    // The unscoped consumer's place: after the first job.
    let mut a = connect(&db);
    assert_eq!(count(&mut a, "SELECT * FROM distlock.consume_tasks(1, 'a', p_queues => ARRAY['in.q'])"), 1);
    let mut scoped = connect(&db);
    scoped.batch_execute("SET ROLE claim_frontier_scoped").expect("set role");
    let taken = count(&mut scoped, "SELECT * FROM distlock.consume_tasks(100, 's', p_queues => ARRAY['in.q'])");
    assert_eq!(taken, 50, "the scoped consumer takes its 50, passing over the 50 outside its scope");
    let got = count(&mut a, "SELECT * FROM distlock.consume_tasks(100, 'a', p_queues => ARRAY['in.q'])");
    assert_eq!(got, 50, "the unscoped consumer finds the 50 jobs the scoped one passed over");
}
