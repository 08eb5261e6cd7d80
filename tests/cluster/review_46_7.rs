//! Seventh review of issue 46 (commit 8032d88): a read from the head counts
//! the live jobs it passed over for good (src/queue/passed_for_good.rs).
//! Each test here failed on 8032d88.

use std::time::Duration;

use crate::claim_order::jobs_of;
use crate::support::*;

/// Enqueues one job named 'job' in `queue` at `priority`, runnable from
/// `run_after` (an SQL expression).
pub(crate) fn enqueue(c: &mut Client, queue: &str, run_after: &str, priority: i32) -> i64 {
    c.query_one(&format!("SELECT distlock.enqueue_task('job', '{{}}', {run_after}, {priority}, 5, '{queue}')"), &[])
        .unwrap_or_else(|e| panic!("enqueue in {queue}: {e}"))
        .get(0)
}

/// Runs `claim` (one statement returning a job id or NULL) in a transaction
/// of its own on `consumer`, and returns what it returned with the entries
/// of the two runnable indexes this backend read in that transaction (its
/// own pending counts: no other session's reads mix in).
pub(crate) fn claim_counting_reads(consumer: &mut Client, claim: &str) -> (Option<i64>, i64) {
    claim_counting_reads_in(consumer, "BEGIN", claim)
}

/// The same in a transaction begun with `begin`.
pub(crate) fn claim_counting_reads_in(consumer: &mut Client, begin: &str, claim: &str) -> (Option<i64>, i64) {
    // A backend's pending counts grow until it flushes them, never within a
    // transaction: the difference over the claim is what it read.
    let reads = |c: &mut Client| -> i64 {
        c.query_one(
            "SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)), 0)::bigint
               FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'distlock'
                AND c.relname IN ('task_queue_runnable_idx', 'task_queue_queue_runnable_idx')",
            &[],
        )
        .expect("this backend's pending index reads")
        .get(0)
    };
    consumer.batch_execute(begin).expect("begin");
    let before = reads(consumer);
    let job: Option<i64> = consumer.query_one(claim, &[]).unwrap_or_else(|e| panic!("{claim}: {e}")).get(0);
    let read = reads(consumer) - before;
    consumer.batch_execute("COMMIT").expect("commit");
    (job, read)
}

/// Has the `n` runnable jobs of `queue` claimed by worker 'crashed' with a
/// 50 ms lease, waits for the leases to run out and has the sweep put them
/// back: pending again, at their old places, each with last_error
/// 'lease expired, put back (worker crashed)' (before the ninth review the
/// sweep wrote the claim's own takeover message, 'lease expired (worker
/// crashed)').
fn crash_and_reap(c: &mut Client, queue: &str, n: i64) {
    let taken = count(c, &format!("SELECT * FROM distlock.consume_tasks({n}, 'crashed', '50 milliseconds', p_queues => ARRAY['{queue}'])"));
    assert_eq!(taken, n, "the crashed consumer's jobs");
    eventually("the leases to run out", Duration::from_secs(10), || {
        count(c, &format!("SELECT 1 FROM distlock.task_queue WHERE queue = '{queue}' AND lease_expires_at < clock_timestamp()")) == n
    });
    c.batch_execute("SELECT count(*) FROM distlock.check_and_recover_timeout_tasks()").expect("the sweep");
    let reaped = count(
        c,
        &format!("SELECT 1 FROM distlock.task_queue WHERE queue = '{queue}' AND status = 'pending' AND last_error LIKE 'lease expired, put back (worker %'"),
    );
    assert_eq!(reaped, n, "the sweep put the jobs back");
}

/// Jobs put back by the sweep (a crashed consumer's: their last_error read
/// 'lease expired (worker ...)' then) keep their old places at the head of the
/// index, so reads from the head claim such jobs first. claim.rs takes a
/// job carrying that message for one taken over from an expired lease and
/// leaves it out of `furthest`; a one-job claim that returned it then has
/// no end, and passed_for_good.rs counts "to the tail": with a paused queue
/// anywhere (here an empty one) and one row passed over (held by another
/// consumer's claim), the count reads every runnable entry of the index
/// (the 100,000 jobs behind), where the claim read two. Such a read also
/// keeps no start (claim_start::claimed, furthest None), so the next claim
/// reads from the head again, and counts to the tail again: every claim,
/// while put-back jobs lie at the head.
#[test]
fn a_read_from_the_head_that_claims_a_job_the_sweep_put_back_counts_only_the_range_it_read() {
    let db = fresh_db("review_46_7_reaped");
    let (mut admin, mut holder, mut consumer) = (connect(&db), connect(&db), connect(&db));
    admin.batch_execute("SELECT distlock.pause_queue('idle')").expect("an empty paused queue");
    jobs_of(&mut admin, "job", "q", 100_000, "1 hour");
    for _ in 0..5 {
        enqueue(&mut admin, "r", "now() - interval '2 hours'", 10);
    }
    crash_and_reap(&mut admin, "r", 5);
    // A job ahead of them, held by another consumer's open claim: each read
    // from the head passes it over (SKIP LOCKED).
    let held = enqueue(&mut admin, "r", "now() - interval '2 hours'", 20);
    holder.batch_execute("BEGIN").expect("begin");
    let taken: Option<i64> =
        holder.query_one("SELECT (SELECT task_id FROM distlock.consume_task('holder'))", &[]).expect("held").get(0);
    assert_eq!(taken, Some(held), "the holder's claim");
    // A new backend: its first claim of every queue reads from the head.
    let mut reads = Vec::new();
    let started = std::time::Instant::now();
    for _ in 0..5 {
        let (job, read) = claim_counting_reads(&mut consumer, "SELECT (SELECT task_id FROM distlock.consume_task('w'))");
        assert!(job.is_some(), "a put-back job");
        reads.push(read);
    }
    let took = started.elapsed();
    holder.batch_execute("ROLLBACK").expect("rollback");
    eprintln!("five one-job claims of put-back jobs read {reads:?} runnable index entries in {took:?}");
    let most = reads.iter().copied().max().unwrap_or(0);
    assert!(
        most < 1000,
        "one-job claims that passed one held row over read {reads:?} runnable index entries ({took:?} for five): \
         the count of jobs passed over for good read to the tail of the index"
    );
}

/// The same mistaken end, the other way: a batch whose last job is one the
/// sweep put back ends, for the count, at the job before it, so the paused
/// backlog the claim read between the two is not counted as lasting; it goes
/// with the xmin horizon and the next read from the head comes after a
/// second, over the 100,000 paused jobs again, not after the 20 s they
/// should space it by (as they do on 9a6bb2b, and as
/// claim_order::the_live_jobs_of_a_paused_queue_keep_reads_from_the_head_spaced
/// expects).
#[test]
fn a_batch_ending_with_a_job_the_sweep_put_back_still_counts_the_paused_backlog_it_passed() {
    let db = fresh_db("review_46_7_batch_end");
    let (mut admin, mut consumer) = (connect(&db), connect(&db));
    admin.batch_execute("SELECT distlock.pause_queue('paused')").expect("pause");
    jobs_of(&mut admin, "job", "paused", 100_000, "1 day");
    let put_back = enqueue(&mut admin, "r", "now() - interval '1 hour'", 0);
    crash_and_reap(&mut admin, "r", 1);
    let first = enqueue(&mut admin, "q", "now()", 10);
    // A new backend: a read from the head of a batch of two: `first`, the
    // paused backlog passed over, then the put-back job.
    let claimed: Vec<i64> = consumer
        .query("SELECT task_id FROM distlock.consume_tasks(2, 'w') ORDER BY task_id", &[])
        .expect("a batch of two")
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut expected = vec![first, put_back];
    expected.sort();
    assert_eq!(claimed, expected, "the batch from the head");
    // The next claim starts at `first` (the put-back job moves no start) and
    // reads the backlog once more whatever the count said: not measured.
    let job = enqueue(&mut admin, "q", "now()", 0);
    assert_eq!(claim_counting_reads(&mut consumer, "SELECT (SELECT task_id FROM distlock.consume_task('w'))").0, Some(job));
    let started = std::time::Instant::now();
    let mut reads = Vec::new();
    while started.elapsed() < Duration::from_secs(4) {
        let job = enqueue(&mut admin, "q", "now()", 0);
        let (claimed, read) = claim_counting_reads(&mut consumer, "SELECT (SELECT task_id FROM distlock.consume_task('w'))");
        assert_eq!(claimed, Some(job), "claims go on after the place");
        reads.push(read);
        std::thread::sleep(Duration::from_millis(100));
    }
    let read: i64 = reads.iter().sum();
    eprintln!("{} one-job claims in 4 s read {read} runnable index entries (most in one: {:?})", reads.len(), reads.iter().max());
    assert!(read < 100_000, "one-job claims in 4 s read {read} index entries: a read from the head over the paused backlog");
}
