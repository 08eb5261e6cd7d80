//! Eighth review of issue 46 (commit 2517637): the count of the jobs a read
//! from the head passed over for good (src/queue/passed_for_good.rs) takes
//! "the first N runnable jobs from the head" in a snapshot of its own, taken
//! after the claim statement ended, for the N rows the claim statement saw
//! and passed over in its snapshot.

use std::time::{Duration, Instant};

use crate::claim_order::{jobs_of, PreparedUntilDropped};
use crate::review_46_7::{claim_counting_reads, claim_counting_reads_in, enqueue};
use crate::support::*;

pub(crate) fn consume_every(c: &mut Client, worker: &str) -> Option<i64> {
    c.query_one(&format!("SELECT (SELECT task_id FROM distlock.consume_task('{worker}'))"), &[])
        .unwrap_or_else(|e| panic!("consume as {worker}: {e}"))
        .get(0)
}

/// Rolls back prepared claim `gid`, which held job `given_back`, and polls
/// `consumer`'s claims (every 50 ms, up to 12 s) until it gets that job:
/// how long that took.
pub(crate) fn given_back_claimed_after(admin: &mut Client, consumer: &mut Client, gid: &str, given_back: i64, name: &str) -> Duration {
    admin.batch_execute(&format!("ROLLBACK PREPARED '{gid}'")).expect("rollback prepared");
    let rolled_back = Instant::now();
    while rolled_back.elapsed() < Duration::from_secs(12) {
        if let Some(job) = consume_every(consumer, "w") {
            assert_eq!(job, given_back, "{name}: nothing else is runnable");
            let took = rolled_back.elapsed();
            eprintln!("{name}: the job ROLLBACK PREPARED gave back claimed after {took:?}");
            return took;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{name}: the given-back job not claimed within 12 s")
}

/// A job of queue 'q' (priority 5, three days old) claimed by a transaction
/// prepared as `gid`, to be given back by ROLLBACK PREPARED behind the
/// consumer's place (same priority, older): only a read from the head
/// finds it.
pub(crate) fn job_held_by_a_prepared_claim(admin: &mut Client, preparer: &mut Client, gid: &str) -> i64 {
    let given_back = enqueue(admin, "q", "now() - interval '3 days'", 5);
    preparer
        .batch_execute(&format!(
            "BEGIN; SELECT count(*) FROM distlock.consume_task('prepared', p_queues => ARRAY['q']); PREPARE TRANSACTION '{gid}'"
        ))
        .expect("a prepared claim");
    given_back
}

/// Makes a claim statement by worker 'stalled' last until advisory lock 468
/// is free: a trigger on the claimed job's new version waits for it. It
/// stands for a claim statement that simply takes a while (a batch of large
/// jobs, a slow disk, a starved CPU): nothing else of the claim changes.
pub(crate) fn install_stall(c: &mut Client) {
    c.batch_execute(
        "CREATE FUNCTION public.review_46_8_stall() RETURNS trigger LANGUAGE plpgsql AS
           $$BEGIN PERFORM pg_catalog.pg_advisory_xact_lock(468); RETURN NULL; END$$;
         CREATE TRIGGER review_46_8_stall AFTER INSERT ON distlock.task_queue FOR EACH ROW
           WHEN (NEW.worker_id = 'stalled') EXECUTE FUNCTION public.review_46_8_stall();",
    )
    .expect("the stall trigger");
}

/// Runs `during` while the claim statement of `consumer` (worker 'stalled',
/// of every queue) is under way, past its snapshot and its read of the
/// index; returns the consumer and what it claimed.
fn claim_with(db: &str, consumer: Client, during: impl FnOnce()) -> (Client, Option<i64>) {
    let (consumer, jobs) = claim_sql_with(db, consumer, "SELECT task_id FROM distlock.consume_task('stalled')", during);
    (consumer, jobs.first().copied())
}

/// Runs `claim` (one statement, worker 'stalled', returning job ids) on
/// `consumer` and `during` while that statement is under way, past its
/// snapshot and its read of the index (review_46_8::install_stall holds it
/// in a trigger on the first job it writes); returns the consumer and the
/// ids, sorted.
pub(crate) fn claim_sql_with(db: &str, consumer: Client, claim: &'static str, during: impl FnOnce()) -> (Client, Vec<i64>) {
    let mut lock = connect(db);
    lock.batch_execute("SELECT pg_advisory_lock(468)").expect("hold the stall");
    let mut consumer = consumer;
    let pid = backend_pid(&mut consumer);
    let claim = std::thread::spawn(move || {
        let mut jobs: Vec<i64> =
            consumer.query(claim, &[]).unwrap_or_else(|e| panic!("{claim}: {e}")).iter().map(|r| r.get(0)).collect();
        jobs.sort();
        (consumer, jobs)
    });
    eventually("the claim statement stalled in its trigger", Duration::from_secs(10), || {
        count(&mut lock, &format!("SELECT FROM pg_stat_activity WHERE pid = {pid} AND wait_event_type = 'Lock' AND wait_event = 'advisory'")) == 1
    });
    during();
    lock.batch_execute("SELECT pg_advisory_unlock(468)").expect("free the stall");
    claim.join().expect("the claim")
}

/// A consumer of every queue reads from the head past 50,000 jobs another
/// consumer's open claim holds (priority 10: SKIP LOCKED), and claims one
/// job (priority 5); behind it lie the 50,000 jobs of a paused queue
/// (priority 0), which that read never reached. If the holder commits while
/// the claim statement runs, its jobs are no longer runnable when
/// passed_for_good.rs counts "the first 50,000 runnable jobs from the head":
/// those are now the paused queue's, and all 50,000 count as passed over for
/// good. The next read from the head comes 10 s later (200 us each), not
/// within a second, so the job that ROLLBACK PREPARED gives back behind the
/// consumer's place waits 10 s (claim_order's held_jobs_given_back_... and
/// a_claim_rolled_back_by_rollback_prepared_... promise about 1-2.5 s). With
/// the holder committing just after the claim (the control) it comes in
/// about a second.
#[test]
fn held_jobs_committed_during_a_read_from_the_head_are_not_counted_as_paused_jobs_passed_for_good() {
    for commit_during_the_claim in [false, true] {
        let name = if commit_during_the_claim { "review_46_8_commit_during" } else { "review_46_8_commit_after" };
        let gid: &'static str = if commit_during_the_claim { "r468_during" } else { "r468_after" };
        let db = fresh_db(name);
        let (mut admin, mut holder, mut preparer) = (connect(&db), connect(&db), connect(&db));
        let _prepared = PreparedUntilDropped { db: &db, gid };
        install_stall(&mut admin);
        let given_back = job_held_by_a_prepared_claim(&mut admin, &mut preparer, gid);
        paused_backlog_and_an_open_claim_of_50_000(&mut admin, &mut holder);
        let mine = enqueue(&mut admin, "q", "now() - interval '2 days'", 5);
        // A new backend: its first claim reads from the head.
        let (mut consumer, claimed) = claim_with(&db, connect(&db), || {
            if commit_during_the_claim {
                holder.batch_execute("COMMIT").expect("the holder commits while the claim runs");
            }
        });
        assert_eq!(claimed, Some(mine), "{name}: the read from the head");
        if !commit_during_the_claim {
            holder.batch_execute("COMMIT").expect("the holder commits after the claim");
        }
        let took = given_back_claimed_after(&mut admin, &mut consumer, gid, given_back, name);
        assert!(
            took < Duration::from_millis(2500),
            "{name}: the job ROLLBACK PREPARED gave back was claimed only after {took:?}: the 50,000 held jobs, \
             committed while the read from the head ran, were counted as 50,000 paused jobs passed over for good"
        );
    }
}

/// The same without the stall: the holder commits as soon as the consumer's
/// claim statement has begun, as any holder may. The claim statement of a
/// read from the head past 50,000 held rows and its count last long enough
/// for that commit to land between them.
#[test]
fn held_jobs_committed_during_a_read_from_the_head_natural_race() {
    let db = fresh_db("review_46_8_natural");
    let (mut admin, mut holder, mut preparer, mut watcher) = (connect(&db), connect(&db), connect(&db), connect(&db));
    let gid = "r468_natural";
    let _prepared = PreparedUntilDropped { db: &db, gid };
    // A consumer whose claim statements are planned already (a claim that
    // finds nothing keeps no place: its next claim reads from the head).
    let mut consumer = connect(&db);
    assert_eq!(consume_every(&mut consumer, "w"), None, "nothing yet");
    let given_back = job_held_by_a_prepared_claim(&mut admin, &mut preparer, gid);
    paused_backlog_and_an_open_claim_of_50_000(&mut admin, &mut holder);
    let mine = enqueue(&mut admin, "q", "now() - interval '2 days'", 5);
    let pid = backend_pid(&mut consumer);
    let claim = std::thread::spawn(move || {
        let started = Instant::now();
        let job = consume_every(&mut consumer, "w");
        (consumer, job, started.elapsed())
    });
    let active = format!("SELECT FROM pg_stat_activity WHERE pid = {pid} AND state = 'active' AND query LIKE '%consume_task%'");
    let waiting = Instant::now();
    while count(&mut watcher, &active) == 0 {
        assert!(waiting.elapsed() < Duration::from_secs(10), "the claim began");
    }
    holder.batch_execute("COMMIT").expect("the holder commits");
    let (mut consumer, claimed, took) = claim.join().expect("the claim");
    eprintln!("the read from the head (claim and count) took {took:?}");
    assert_eq!(claimed, Some(mine), "the read from the head");
    let took = given_back_claimed_after(&mut admin, &mut consumer, gid, given_back, "natural");
    assert!(took < Duration::from_millis(2500), "natural: the given-back job was claimed only after {took:?}");
}

/// A claim of every queue that finds nothing to claim (everything runnable
/// is held back: here 100,000 jobs of a paused queue) reads from the head,
/// steps over the whole backlog, and keeps no place (claim_start::claimed
/// drops what that read met when it claimed nothing), so the next claim
/// reads from the head again: an idle consumer polling, or a waiting one
/// looking again, reads the backlog once per look. passed_for_good.rs still
/// counts, every such look, which of the 100,000 rows were passed over for
/// good, reading the backlog a second time for an answer nothing keeps: each
/// empty look reads 200,000 index entries instead of 100,000 (9a6bb2b read
/// the backlog once).
#[test]
fn a_read_from_the_head_that_claims_nothing_does_not_count_what_it_passed_over() {
    let db = fresh_db("review_46_8_empty_look");
    let (mut admin, mut consumer) = (connect(&db), connect(&db));
    admin.batch_execute("SELECT distlock.pause_queue('idle')").expect("pause");
    jobs_of(&mut admin, "job", "idle", 100_000, "1 day");
    let mut reads = Vec::new();
    let started = Instant::now();
    for _ in 0..5 {
        let (job, read) = claim_counting_reads(&mut consumer, "SELECT (SELECT task_id FROM distlock.consume_task('w'))");
        assert_eq!(job, None, "nothing to claim");
        reads.push(read);
    }
    eprintln!("five empty looks read {reads:?} runnable index entries in {:?}", started.elapsed());
    let most = reads.iter().copied().max().unwrap_or(0);
    assert!(
        most < 150_000,
        "an empty look over a paused backlog of 100,000 read {most} runnable index entries: \
         the count of jobs passed over for good read the backlog again, for a read that keeps no place"
    );
}

/// Held up (passes on 2517637): this library serving a database still at
/// 0.3.0's schema (before ALTER EXTENSION UPDATE) counts the jobs a read from
/// the head passed over for good, for a consumer of every queue with a
/// paused queue and for a scoped one, without an error, and claims.
#[test]
fn the_count_of_jobs_passed_for_good_runs_on_the_0_3_0_schema() {
    let name = "review_46_8_at_0_3_0";
    let mut c = fresh_db_at_version(name, "0.3.0");
    c.batch_execute("SELECT distlock.pause_queue('idle')").expect("pause");
    jobs_of(&mut c, "b.job", "idle", 1000, "1 day");
    jobs_of(&mut c, "b.job", "b.q", 1000, "1 day");
    jobs_of(&mut c, "a.job", "a.q", 2, "1 hour");
    let role = format!("{name}_a");
    c.batch_execute(&format!(
        "DROP ROLE IF EXISTS {role}; CREATE ROLE {role}; SELECT distlock.grant_capability('{role}', 'consumer', 'a.')"
    ))
    .expect("a scoped consumer");
    let mut unscoped = connect(name);
    let job: Option<i64> =
        unscoped.query_one("SELECT (SELECT task_id FROM distlock.consume_task('w'))", &[]).expect("unscoped claim").get(0);
    assert!(job.is_some(), "the unscoped claim past the paused queue");
    let mut scoped = connect(name);
    scoped.batch_execute(&format!("SET ROLE {role}")).expect("set role");
    for route in ["NULL", "ARRAY['a.q']"] {
        let job: Option<i64> = scoped
            .query_one(&format!("SELECT (SELECT task_id FROM distlock.consume_task('w', p_queues => {route}))"), &[])
            .unwrap_or_else(|e| panic!("scoped claim along {route} on 0.3.0: {e}"))
            .get(0);
        let _ = job;
    }
    let version: String =
        c.query_one("SELECT extversion FROM pg_extension WHERE extname = 'pg_distlock'", &[]).expect("version").get(0);
    assert_eq!(version, "0.3.0", "still before the update");
}

/// Without the runnable log's word (table mode: no shared memory; or a
/// claim in a REPEATABLE READ or SERIALIZABLE transaction, whose snapshot may
/// be older than the log), a backend reads from the head every 100 ms
/// whatever its last read from the head stepped over (claim_start::head_every
/// with `vouched` false), so what passed_for_good.rs counts is never used.
/// It still counts, on every such read: a read from the head past a paused
/// backlog of 100,000 jobs reads 200,000 index entries instead of 100,000,
/// ten times a second per consumer.
#[test]
fn a_read_from_the_head_the_runnable_log_does_not_vouch_for_does_not_count_what_it_passed_over() {
    let mut result = Vec::new();
    for (mode, port, begin) in [
        ("table mode", plain_port(), "BEGIN"),
        ("repeatable read", primary_port(), "BEGIN ISOLATION LEVEL REPEATABLE READ"),
    ] {
        let name = if port == plain_port() { "review_46_8_unvouched_table" } else { "review_46_8_unvouched_rr" };
        let db = fresh_db_on(port, name);
        let (mut admin, mut consumer) = (connect_to(port, &db, "admin"), connect_to(port, &db, "consumer"));
        admin.batch_execute("SELECT distlock.pause_queue('idle')").expect("pause");
        jobs_of(&mut admin, "job", "idle", 100_000, "1 day");
        let job = enqueue(&mut admin, "q", "now()", 0);
        // A new backend: its first claim reads from the head, past the backlog.
        let (claimed, read) =
            claim_counting_reads_in(&mut consumer, begin, "SELECT (SELECT task_id FROM distlock.consume_task('w'))");
        assert_eq!(claimed, Some(job), "{mode}: the read from the head");
        eprintln!("{mode}: a read from the head past 100,000 paused jobs read {read} runnable index entries");
        if read >= 150_000 {
            result.push(format!("{mode}: {read} entries"));
        }
    }
    assert!(
        result.is_empty(),
        "reads from the head the runnable log does not vouch for (repeated every 100 ms whatever they met) \
         read the paused backlog twice, counting jobs passed over for good for nothing: {result:?}"
    );
}

/// 50,000 jobs in paused queue 'idle' (due a day ago), and 50,000 of
/// priority 10 in queue q that `holder` claims in a transaction left open.
pub(crate) fn paused_backlog_and_an_open_claim_of_50_000(admin: &mut Client, holder: &mut Client) {
    admin.batch_execute("SELECT distlock.pause_queue('idle')").expect("pause");
    jobs_of(admin, "job", "idle", 50000, "1 day");
    admin
        .batch_execute(
            "SELECT distlock.enqueue_tasks('job', (SELECT array_agg('{}'::jsonb) FROM generate_series(1, 50000)),
                                           now() - interval '1 day', 10, p_queue => 'q');",
        )
        .expect("50,000 jobs to hold");
    holder
        .batch_execute(
            "BEGIN;
             SELECT count(*) FROM generate_series(1, 50) g, distlock.consume_tasks(1000 + g * 0, 'held', p_queues => ARRAY['q'])",
        )
        .expect("an open claim of 50,000 jobs");
}
