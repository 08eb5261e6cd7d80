//! Ninth review of issue 46 (commit c9072f7): the count of the jobs a read
//! from the head passed over for good (src/queue/passed_for_good.rs,
//! sql/queries/queue_passed_for_good*.sql).

use std::time::{Duration, Instant};

use crate::claim_order::jobs_of;
use crate::review_46_8::claim_sql_with;
use crate::support::*;

/// Runs `claim` (one statement returning a job id or NULL) in a transaction
/// of its own on `consumer`: what it returned, the entries of the two
/// runnable indexes this backend read in it, the blocks of those indexes it
/// fetched (hit or read: every page a scan walked, entries returned or
/// not), and how long the claim statement took.
fn claim_counting_blocks(consumer: &mut Client, claim: &str) -> (Option<i64>, i64, i64, Duration) {
    let reads = |c: &mut Client| -> (i64, i64) {
        let row = c
            .query_one(
                "SELECT coalesce(sum(pg_stat_get_xact_tuples_returned(c.oid)), 0)::bigint,
                        coalesce(sum(pg_stat_get_xact_blocks_fetched(c.oid)), 0)::bigint
                   FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                  WHERE n.nspname = 'distlock'
                    AND c.relname IN ('task_queue_runnable_idx', 'task_queue_queue_runnable_idx')",
                &[],
            )
            .expect("this backend's pending index reads");
        (row.get(0), row.get(1))
    };
    consumer.batch_execute("BEGIN").expect("begin");
    let (entries, blocks) = reads(consumer);
    let started = Instant::now();
    let job: Option<i64> = consumer.query_one(claim, &[]).unwrap_or_else(|e| panic!("{claim}: {e}")).get(0);
    let took = started.elapsed();
    let (entries_after, blocks_after) = reads(consumer);
    consumer.batch_execute("COMMIT").expect("commit");
    (job, entries_after - entries, blocks_after - blocks, took)
}

/// A scoped consumer (tenant a, scope 'a.') names its queue 'a.q', which
/// holds ten jobs named outside its scope ('b.job', an unscoped producer's)
/// before 300,000 of its own. Each read from the head steps over the ten
/// and claims the next of its own: eleven index entries, a few pages. Its
/// count (queue_passed_for_good_in_queue.sql) bounds the queue with `>=`
/// and `<=` instead of `=`; a btree stops a scan on a later column's key
/// only while every column before it has an equality, so neither `priority
/// > $4` nor the place `(run_after, id) <= ($5, $6)` ends its scans: the
/// first range (no job of a higher priority) walks every entry of the
/// queue to its end, 300,000 entries, on every read from the head, which
/// the ten jobs passed over for good let come every second. (The claim
/// statement itself, with `queue = $7`, and the count of every queue are
/// bounded.)
#[test]
fn the_count_along_a_named_queue_reads_no_further_than_the_claim() {
    let (mut c, a, _b) = crate::scopes::two_tenants("review_46_9_named_range", &["consumer"]);
    let db: String = c.query_one("SELECT current_database()", &[]).expect("database").get(0);
    jobs_of(&mut c, "b.job", "a.q", 10, "1 day");
    jobs_of(&mut c, "a.job", "a.q", 300_000, "1 hour");
    c.batch_execute("VACUUM ANALYZE distlock.task_queue").expect("vacuum");
    let mut consumer = connect(&db);
    consumer.batch_execute(&format!("SET ROLE {a}")).expect("set role");
    let claim = "SELECT (SELECT task_id FROM distlock.consume_task('w', p_queues => ARRAY['a.q']))";
    // A new backend: its first claim reads from the head, then claims go on
    // after its place, one every 100 ms for 4 s, with reads from the head
    // among them as often as the ten jobs passed over for good allow.
    let mut claims = Vec::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(4) {
        let (job, entries, blocks, took) = claim_counting_blocks(&mut consumer, claim);
        assert!(job.is_some(), "a's jobs are claimed");
        claims.push((entries, blocks, took));
        std::thread::sleep(Duration::from_millis(100));
    }
    let heavy: Vec<_> = claims.iter().filter(|(_, blocks, _)| *blocks >= 100).collect();
    eprintln!("{} one-job claims of a.q in 4 s; those that fetched 100 index blocks or more: {heavy:?}", claims.len());
    let (entries, blocks, took) = claims[0];
    assert!(
        blocks < 100,
        "the read from the head stepped over ten jobs and claimed one ({entries} index entries returned), \
         yet fetched {blocks} index blocks and took {took:?}: the count along a.q's index walked the whole queue \
         ({} such claims in 4 s: {heavy:?})",
        heavy.len()
    );
}

/// review_46_8's first test, with one change: the read from the head also
/// takes over one expired lease (a consumer that crashed, or ran past its
/// lease: any fleet has them now and then), in a batch of two. The job
/// taken over carries the takeover's mark, so claim.rs gives the count no
/// end (TAIL), and with the 50,000 held jobs committed while the claim
/// statement ran, "the first 49,999 runnable jobs from the head" are the
/// paused queue's, behind the claim's last job: all counted as lasting. The
/// next read from the head comes 10 s later, and so does the job ROLLBACK
/// PREPARED gives back. docs/design/queue-storage.md says only "a job put
/// back by the sweep in that very read" can widen the count; a job taken
/// over has no place in the runnable index at all, so the claim's last
/// runnable job is still where its read ended.
#[test]
fn a_read_from_the_head_that_also_takes_over_an_expired_lease_keeps_its_end() {
    for commit_during_the_claim in [false, true] {
        let name = if commit_during_the_claim { "review_46_9_takeover_during" } else { "review_46_9_takeover_after" };
        let gid: &'static str = if commit_during_the_claim { "r469_during" } else { "r469_after" };
        let db = fresh_db(name);
        let (mut admin, mut holder, mut preparer) = (connect(&db), connect(&db), connect(&db));
        let _prepared = crate::claim_order::PreparedUntilDropped { db: &db, gid };
        crate::review_46_8::install_stall(&mut admin);
        let given_back = crate::review_46_8::job_held_by_a_prepared_claim(&mut admin, &mut preparer, gid);
        admin.batch_execute("SELECT distlock.pause_queue('idle')").expect("pause");
        admin
            .batch_execute(
                "SELECT count(*) FROM distlock.enqueue_tasks('job', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 50000)),
                                               now() - interval '1 day', 0, p_queue => 'idle');
                 SELECT count(*) FROM distlock.enqueue_tasks('job', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 50000)),
                                               now() - interval '1 day', 10, p_queue => 'q');",
            )
            .expect("50,000 paused jobs and 50,000 to hold");
        // A crashed consumer's job whose lease has run out.
        let crashed = crate::review_46_7::enqueue(&mut admin, "x", "now() - interval '1 day'", 0);
        let taken = count(&mut admin, "SELECT * FROM distlock.consume_tasks(1, 'crashed', '50 milliseconds', p_queues => ARRAY['x'])");
        assert_eq!(taken, 1, "the crashed consumer's job");
        eventually("the lease to run out", Duration::from_secs(10), || {
            count(&mut admin, &format!("SELECT 1 FROM distlock.task_queue WHERE id = {crashed} AND lease_expires_at < clock_timestamp()")) == 1
        });
        holder
            .batch_execute(
                "BEGIN;
                 SELECT count(*) FROM generate_series(1, 50) g, distlock.consume_tasks(1000 + g * 0, 'held', p_queues => ARRAY['q'])",
            )
            .expect("an open claim of 50,000 jobs");
        let mine = crate::review_46_7::enqueue(&mut admin, "q", "now() - interval '2 days'", 5);
        // A new backend: its first claim reads from the head.
        let (mut consumer, claimed) =
            claim_sql_with(&db, connect(&db), "SELECT task_id FROM distlock.consume_tasks(2, 'stalled')", || {
                if commit_during_the_claim {
                    holder.batch_execute("COMMIT").expect("the holder commits while the claim runs");
                }
            });
        let mut expected = vec![crashed, mine];
        expected.sort();
        assert_eq!(claimed, expected, "{name}: the read from the head took the expired lease over and claimed mine");
        if !commit_during_the_claim {
            holder.batch_execute("COMMIT").expect("the holder commits after the claim");
        }
        let took = crate::review_46_8::given_back_claimed_after(&mut admin, &mut consumer, gid, given_back, name);
        assert!(
            took < Duration::from_millis(2500),
            "{name}: the job ROLLBACK PREPARED gave back was claimed only after {took:?}: a read from the head that took \
             over an expired lease had no end for its count, and the 50,000 held jobs committed meanwhile made it count \
             the 50,000 paused jobs behind its last job as passed over for good"
        );
    }
}

/// The other way: jobs that become runnable ahead of the claim's last job
/// while the claim statement runs (here 50,000 of priority 10, enqueued by
/// a transaction whose COMMIT PREPARED lands then; a plain commit does the
/// same to the count) are not in the claim's snapshot but are in the
/// count's, and "the first 50,000 runnable jobs from the head" are now
/// those, none of a paused queue: the 50,000 paused jobs the claim did pass
/// over count as nothing lasting. Once the new jobs are claimed by others,
/// reads from the head come every second over the paused backlog instead
/// of every 10 s (4 s of one-job claims read it again). With the commit
/// after the claim (the control) they are spaced. The count now runs in a
/// snapshot taken right before the claim (plans/in_snapshot.rs).
#[test]
fn jobs_committed_ahead_of_the_claim_during_a_read_from_the_head_do_not_uncount_the_paused_backlog() {
    let mut result: Vec<i64> = Vec::new();
    for commit_during_the_claim in [false, true] {
        let name = if commit_during_the_claim { "review_46_9_ahead_during" } else { "review_46_9_ahead_after" };
        let gid: &'static str = if commit_during_the_claim { "r469a_during" } else { "r469a_after" };
        let db = fresh_db(name);
        let (mut admin, mut producer, mut other) = (connect(&db), connect(&db), connect(&db));
        let _prepared = crate::claim_order::PreparedUntilDropped { db: &db, gid };
        crate::review_46_8::install_stall(&mut admin);
        admin.batch_execute("SELECT distlock.pause_queue('idle')").expect("pause");
        jobs_of(&mut admin, "job", "idle", 50_000, "1 day");
        let mine = crate::review_46_7::enqueue(&mut admin, "q", "now() - interval '1 hour'", 0);
        producer
            .batch_execute(&format!(
                "BEGIN;
                 SELECT count(*) FROM distlock.enqueue_tasks('job', (SELECT array_agg('{{}}'::jsonb) FROM generate_series(1, 50000)),
                                                             now() - interval '1 hour', 10, p_queue => 'urgent');
                 PREPARE TRANSACTION '{gid}'"
            ))
            .expect("50,000 urgent jobs, prepared");
        let (mut consumer, claimed) =
            claim_sql_with(&db, connect(&db), "SELECT task_id FROM distlock.consume_tasks(1, 'stalled')", || {
                if commit_during_the_claim {
                    admin.batch_execute(&format!("COMMIT PREPARED '{gid}'")).expect("commit prepared during the claim");
                }
            });
        assert_eq!(claimed, vec![mine], "{name}: the read from the head");
        let head_read_at = Instant::now();
        if !commit_during_the_claim {
            admin.batch_execute(&format!("COMMIT PREPARED '{gid}'")).expect("commit prepared after the claim");
        }
        // Other consumers take the urgent jobs.
        other
            .batch_execute(
                "SELECT count(*) FROM generate_series(1, 50) g, distlock.consume_tasks(1000 + g * 0, 'other', p_queues => ARRAY['urgent'])",
            )
            .expect("the urgent jobs claimed");
        let reads = one_job_claims_for_4_s(&mut admin, &mut consumer, "w", name, head_read_at);
        let read: i64 = reads.iter().sum();
        result.push(read);
    }
    // Both pay once for the dead entries of the urgent jobs other consumers
    // claimed (the first claim's range of higher priorities steps over them
    // and marks them dead): 50,002 entries with the commit after the claim.
    let (after, during) = (result[0], result[1]);
    assert!(
        during < after + 50_000,
        "with the urgent jobs committed during the read from the head, 4 s of one-job claims read {during} runnable \
         index entries, {after} with them committed after it: a read from the head over the 50,000 paused jobs again \
         within a second, as jobs committed ahead of the claim's last job filled the count's first 50,000 and the \
         paused backlog counted as nothing lasting"
    );
}

/// One-job claims by `consumer` (as `worker`) for 4 s, each of a job just
/// enqueued in queue q, 100 ms apart, after a read from the head at
/// `head_read_at`: the runnable index entries each read.
pub(crate) fn one_job_claims_for_4_s(
    admin: &mut Client,
    consumer: &mut Client,
    worker: &str,
    name: &str,
    head_read_at: Instant,
) -> Vec<i64> {
    let started = Instant::now();
    let mut reads = Vec::new();
    let claim = format!("SELECT (SELECT task_id FROM distlock.consume_task('{worker}'))");
    while started.elapsed() < Duration::from_secs(4) {
        let job = crate::review_46_7::enqueue(admin, "q", "now()", 0);
        let (claimed, read) = crate::review_46_7::claim_counting_reads(consumer, &claim);
        assert_eq!(claimed, Some(job), "{name}: claims go on after the place");
        if read > 1000 {
            eprintln!("{name}: a claim {:?} after the read from the head read {read} entries", head_read_at.elapsed());
        }
        reads.push(read);
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "{name}: {} one-job claims in 4 s read {} runnable index entries (most in one: {:?})",
        reads.len(),
        reads.iter().sum::<i64>(),
        reads.iter().max()
    );
    reads
}
