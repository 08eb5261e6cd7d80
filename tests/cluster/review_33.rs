//! Review 33 of the takeover mark (claim.rs, queue_consume*.sql): a claim
//! knows a job it returned was taken over from an expired lease by its
//! last_error, 'lease expired (worker ...)'. Other writers could put that
//! text on a runnable job: a consumer's fail_task text, retry_dead_jobs of
//! a job that died at a 0.3.0 takeover, a job 0.3.0's sweep put back. A
//! claim that returned only such jobs kept no start, so every claim read
//! the runnable index from its head. The test here failed on 742088c.

use crate::review_46_7::claim_counting_reads;
use crate::support::*;

/// 500 jobs whose last error reads like a takeover (here a consumer's
/// fail_task text; equally a job dead at a 0.3.0 takeover), retried. With a
/// snapshot held, one-job claims start after their last job: about one
/// index entry each, plus a read from the head about once a second.
#[test]
fn retried_jobs_whose_last_error_reads_like_a_takeover_do_not_send_every_claim_to_the_head() {
    let db = fresh_db("review_33_forged_mark");
    let (mut admin, mut holder, mut consumer) = (connect(&db), connect(&db), connect(&db));
    admin
        .batch_execute(
            "SELECT count(*) FROM distlock.enqueue_tasks('job', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 500)),
                                                         now() - interval '1 hour', 0, 1, 'q');
             SELECT count(*) FROM distlock.consume_tasks(1000, 'w', p_queues => ARRAY['q']);
             SELECT count(*) FROM distlock.task_queue j,
                    LATERAL distlock.fail_task(j.id, p_error => 'lease expired (worker w)', p_worker_id => 'w')
              WHERE j.status = 'processing';
             SELECT distlock.retry_dead_jobs('q');",
        )
        .expect("500 runnable jobs carrying the takeover's text");
    assert_eq!(
        count(&mut admin, "SELECT 1 FROM distlock.task_queue WHERE status = 'pending' AND last_error = 'lease expired (worker w)'"),
        500,
        "the jobs are runnable again with the consumer's text"
    );
    admin.batch_execute("VACUUM distlock.task_queue").expect("vacuum");
    holder.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").expect("a held snapshot");
    let mut reads = Vec::new();
    for _ in 0..500 {
        let (job, read) = claim_counting_reads(&mut consumer, "SELECT (SELECT task_id FROM distlock.consume_task('c'))");
        assert!(job.is_some(), "a job for every claim");
        reads.push(read);
    }
    holder.batch_execute("COMMIT").expect("end of the hold");
    assert_eq!(
        count(&mut admin, "SELECT 1 FROM distlock.task_queue WHERE status = 'processing' AND last_error = 'lease expired, put back (worker w)'"),
        500,
        "a claimed job's text says what the sweep says"
    );
    let total: i64 = reads.iter().sum();
    // Each claim starting at the head reads every job claimed before it in
    // the hold: about 125,000 entries.
    assert!(total < 10_000, "500 one-job claims read {total} runnable index entries (last ten: {:?})", &reads[490..]);
}
