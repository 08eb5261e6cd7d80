//! Fourth review of the shared claim frontier (1ef9096: abort entries
//! registered before each claim statement, the prepared-transaction epoch
//! carried by places, the table of prepared xids learned from
//! pg_prepared_xacts after the table is made, a waiting consumer whose place
//! came from the frontier reading from the head before it sleeps).

use crate::review_46_7::claim_counting_reads;
use crate::support::*;

fn no_prepared_transactions(admin: &mut Client) -> bool {
    if scalar(admin, "SHOW max_prepared_transactions").as_deref() == Some("0") {
        eprintln!("skipped: max_prepared_transactions is 0 on this cluster");
        return true;
    }
    false
}

/// Rolls back prepared transaction `gid` of database `db` however the test
/// ends: one left prepared would keep the frontier off for every later test.
struct RollbackPrepared {
    db: String,
    gid: &'static str,
}

impl Drop for RollbackPrepared {
    fn drop(&mut self) {
        if let Ok(mut c) = Client::connect(
            &format!("host=127.0.0.1 port={} user=postgres dbname={}", primary_port(), self.db),
            NoTls,
        ) {
            let _ = c.batch_execute(&format!("ROLLBACK PREPARED '{}'", self.gid));
        }
    }
}

/// Fix 3 (learn_prepared) records every transaction pg_prepared_xacts
/// lists after the table is made: of every database, whether or not it
/// changed a queue (a PREPARE records only those that did). While any of
/// them stays prepared, publishable_epoch is None for every claim of the
/// server: the frontier is off, and every unscoped claim pays
/// TransactionIdIsInProgress per recorded xid. A transaction left prepared
/// in another database that never touched pg_distlock (an XA manager's
/// orphan can stay for days) therefore turns the frontier off everywhere
/// after a restart, where before this change it cost nothing. Here: the
/// claim_frontier test's pattern (a backend behind 1,000 claims, a
/// snapshot held) after a crash restart with such a transaction prepared.
#[test]
fn review_frontier4_a_transaction_prepared_in_another_database_turns_the_frontier_off_after_a_restart() {
    let db = fresh_db("review_frontier4_unrelated_prepared");
    let other = fresh_db("review_frontier4_other_database");
    let mut admin = connect(&db);
    if no_prepared_transactions(&mut admin) {
        return;
    }
    let _cleanup = RollbackPrepared { db: other.clone(), gid: "review_frontier4_unrelated" };
    let mut elsewhere = connect(&other);
    elsewhere
        .batch_execute(
            "BEGIN; CREATE TABLE public.review_frontier4_unrelated (x int); \
             INSERT INTO public.review_frontier4_unrelated VALUES (1); \
             PREPARE TRANSACTION 'review_frontier4_unrelated'",
        )
        .expect("a prepared transaction that never touched pg_distlock, in another database");
    drop(elsewhere);
    drop(admin);
    let mut producer = crash_restart_primary(&db);
    assert_eq!(
        count(&mut producer, "SELECT 1 FROM pg_prepared_xacts WHERE gid = 'review_frontier4_unrelated'"),
        1,
        "the unrelated prepared transaction survives the restart"
    );
    producer
        .batch_execute(
            "SELECT count(distlock.enqueue_task('job', '{}', now() - interval '1 minute', 0, 5, 'rf4_u')) FROM generate_series(1, 2000)",
        )
        .expect("2,000 jobs");
    let mut holder = connect(&db);
    holder.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class").expect("hold a snapshot");
    let mut a = connect(&db);
    let mut b = connect(&db);
    let claim_one = "SELECT task_id FROM distlock.consume_task('a', p_queues => ARRAY['rf4_u'])";
    let (first, _) = claim_counting_reads(&mut a, claim_one);
    assert!(first.is_some(), "a's first claim");
    let taken = count(&mut b, "SELECT * FROM distlock.consume_tasks(1000, 'b', p_queues => ARRAY['rf4_u'])");
    assert_eq!(taken, 1000, "b's claim");
    let (next, read) = claim_counting_reads(&mut a, claim_one);
    holder.batch_execute("ROLLBACK").expect("release the snapshot");
    assert!(next.is_some_and(|id| id > first.unwrap_or_default() + 1000), "a's next job ({next:?}) is after b's");
    assert!(
        read < 100,
        "a's claim stepped over {read} index entries: b published no frontier, a transaction prepared in another \
         database, which changed no queue, being recorded as one that may give jobs back"
    );
}

/// Fix 4 makes a waiting consumer whose place came from the frontier read
/// from the head before it sleeps (claim_start::start drops that place when
/// the frontier is off, consume.rs retries with without_frontier), outside
/// the spacing the start keeps between reads from the head (head_every: up
/// to a minute under a held snapshot, by what the last one stepped over).
/// A read from the head steps over every index entry a held snapshot keeps.
/// In a fleet a place mostly comes from the frontier, so every consumer that
/// catches up and waits walks the whole dead range once more per wait. Here
/// 2,000 jobs are claimed under a held snapshot, a's place at the last one
/// from the frontier; a waits and a new job wakes it. At c282c48 the wait
/// stepped over 2,002 entries (the one read from the head its spacing
/// allowed), here 4,002: twice the walk, on the path the frontier exists
/// to make cheap under a hold.
#[test]
fn review_frontier4_a_waiting_consumer_at_the_frontier_walks_every_dead_entry_from_the_head_before_it_sleeps() {
    let db = fresh_db("review_frontier4_waiting_walk");
    let mut producer = connect(&db);
    producer
        .batch_execute(
            "SELECT count(distlock.enqueue_task('job', '{}', now() - interval '1 minute', 0, 5, 'rf4_w')) FROM generate_series(1, 2000)",
        )
        .expect("2,000 jobs");
    let mut holder = connect(&db);
    holder.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM pg_class").expect("hold a snapshot");
    let mut a = connect(&db);
    let mut b = connect(&db);
    let claim_one = "SELECT task_id FROM distlock.consume_task('a', p_queues => ARRAY['rf4_w'])";
    let (first, _) = claim_counting_reads(&mut a, claim_one);
    assert!(first.is_some(), "a's first claim");
    let taken = count(&mut b, "SELECT * FROM distlock.consume_tasks(999, 'b', p_queues => ARRAY['rf4_w'])")
        + count(&mut b, "SELECT * FROM distlock.consume_tasks(999, 'b', p_queues => ARRAY['rf4_w'])");
    assert_eq!(taken, 1998, "b's claims");
    let (last, read) = claim_counting_reads(&mut a, claim_one);
    assert!(last.is_some(), "a claims the last job");
    assert!(read < 100, "a's claim of the last job starts at b's frontier (it stepped over {read} entries)");
    // a waits; a job comes 0.3 s into its wait and wakes it: before the
    // second its sleep is capped at when its place came from the frontier
    // (consume.rs), so that the wake-up, not that cap, ends the sleep. (At
    // 1 s the two raced: the capped look read from the head, found nothing
    // and dropped the place, and the look the job woke read from the head
    // again, 4,003 entries in CI at 5acd03a; the second walk is the older
    // rule that an empty read from the head keeps no place.)
    let wait = "SELECT (SELECT task_id FROM distlock.consume_task('a', p_wait => '20 seconds', p_queues => ARRAY['rf4_w']))";
    let waiting = std::thread::spawn(move || {
        let result = claim_counting_reads(&mut a, wait);
        (result, a)
    });
    std::thread::sleep(std::time::Duration::from_millis(300)); // the job's arrival, not synchronisation
    let new = crate::review_46_7::enqueue(&mut producer, "rf4_w", "now()", 0);
    let ((got, read), mut a) = waiting.join().expect("a's wait");
    assert_eq!(got, Some(new), "a's wait claims the new job");
    let newer = crate::review_46_7::enqueue(&mut producer, "rf4_w", "now()", 0);
    let (next, read_next) = claim_counting_reads(&mut a, claim_one);
    holder.batch_execute("ROLLBACK").expect("release the snapshot");
    assert_eq!(next, Some(newer), "a claims the next new job");
    assert!(read_next < 100, "a's next claim stepped over {read_next} index entries");
    assert!(
        read < 2100,
        "a's wait stepped over {read} index entries (c282c48: 2,002, the one read from the head its spacing \
         allowed): the look before the sleep read from the head once more past the 2,000 entries the held \
         snapshot keeps, its place having come from the frontier"
    );
}
