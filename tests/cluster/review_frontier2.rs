//! Second review of the shared claim frontier (fa979fb,
//! src/shared/claim_frontier.rs). Publishing only once the claim commits
//! stops a claim that is given back from publishing its own end, but the
//! frontier still passes jobs that are given back (or made runnable) with
//! no runnable log entry when someone else publishes past them: another
//! consumer that skipped them while they were held, or the same backend's
//! next claim from a place that outlived the jobs' return. Each test makes
//! consumer a, whose own place (after its first job) lies before the jobs
//! and whose log says nothing of them, claim while they are runnable; on
//! main (and with a starting at its own place) a claims them, here it
//! starts at the frontier after them. The last test shows the bound the
//! design note gives for such jobs ("within a second") not holding for a
//! consumer that waits.

use std::time::{Duration, Instant};

use crate::review_46_7::enqueue;
use crate::review_frontier::{claim_of, claimed, failed_and_ended, pending};
use crate::support::*;


/// A trigger that makes worker 'doomed''s claim of a job of `queue` fail,
/// after waiting for advisory lock 4242 (held by the test while it acts).
fn doomed_in(admin: &mut Client, queue: &str) {
    admin
        .batch_execute(&format!(
            "CREATE FUNCTION public.review_frontier2_fail() RETURNS trigger LANGUAGE plpgsql AS
               $$BEGIN PERFORM pg_advisory_xact_lock(4242); RAISE EXCEPTION 'the look fails in its second queue'; END$$;
             CREATE TRIGGER review_frontier2_fail AFTER INSERT ON distlock.task_queue FOR EACH ROW
               WHEN (NEW.worker_id = 'doomed' AND NEW.queue = '{queue}') EXECUTE FUNCTION public.review_frontier2_fail();"
        ))
        .expect("the fault");
}

/// A look of consumer b claims rf2_a's two jobs and, still running (its
/// claim in rf2_b waits), holds them; c claims the job after them,
/// skipping the held ones (SKIP LOCKED), and commits: c publishes its end
/// as the frontier. b's look then fails and rolls back: its jobs are
/// runnable again, and consume.rs registers a claim's abort entry in the
/// runnable log (wake::jobs_claimed) only after the whole look, so no
/// entry is written. Publishing at commit kept b from publishing past its
/// own jobs, not c. a, whose place lies before them, then starts at c's
/// frontier and claims nothing.
#[test]
fn review_frontier2_a_failed_look_gives_back_jobs_another_consumer_skipped_and_published_past() {
    let db = fresh_db("review_frontier2_third_party_look");
    let mut admin = connect(&db);
    doomed_in(&mut admin, "rf2_b");
    let first = enqueue(&mut admin, "rf2_a", "now() - interval '3 minutes'", 0);
    let j1 = enqueue(&mut admin, "rf2_a", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf2_a", "now() - interval '1 minute'", 0);
    enqueue(&mut admin, "rf2_b", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut c = connect(&db);
    let mut b = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf2_a")), vec![first], "a's first claim: its place is at the first job");
    admin.batch_execute("SELECT pg_advisory_lock(4242)").expect("hold the look in rf2_b");
    let look = std::thread::spawn(move || {
        failed_and_ended(&mut b, "SELECT task_id FROM distlock.consume_tasks(3, 'doomed', p_queues => ARRAY['rf2_a', 'rf2_b'])")
    });
    eventually("b's look to wait in rf2_b, holding rf2_a's jobs", Duration::from_secs(10), || {
        count(&mut admin, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted") == 1
    });
    let later = enqueue(&mut admin, "rf2_a", "now() - interval '30 seconds'", 0);
    assert_eq!(claimed(&mut c, &claim_of("c", 1, "rf2_a")), vec![later], "c skips the jobs b's look holds");
    admin.batch_execute("SELECT pg_advisory_unlock(4242)").expect("let b's look fail");
    assert!(look.join().expect("b's look"), "b's look fails in rf2_b");
    assert_eq!(pending(&mut admin, &[j1, j2]), 2, "b's jobs are runnable again");
    let got = claimed(&mut a, &claim_of("a", 2, "rf2_a"));
    assert_eq!(got, vec![j1, j2], "a claims both runnable jobs; it got {got:?}: it started at c's frontier, after them");
}

/// The same look failing inside a savepoint, in a transaction that claimed
/// before (so that the abort hook that forgets the backend's place is the
/// top transaction's, armed once): ROLLBACK TO gives the look's jobs back
/// with no log entry (the look never reached wake::jobs_claimed), and the
/// backend's own place, set at the last of them by the look's claim,
/// survives. Its next claim in the transaction starts there (taking that
/// last job, stepping over the one before) and publishes that end once the
/// transaction commits: every backend then steps over the job before it.
/// (On main only b itself did.)
#[test]
fn review_frontier2_a_look_failing_in_a_savepoint_leaves_the_backends_next_claim_publishing_past_its_jobs() {
    let db = fresh_db("review_frontier2_savepoint");
    let mut admin = connect(&db);
    doomed_in(&mut admin, "rf2_b");
    enqueue(&mut admin, "rf2_other", "now() - interval '5 minutes'", 0);
    let first = enqueue(&mut admin, "rf2_a", "now() - interval '3 minutes'", 0);
    let j1 = enqueue(&mut admin, "rf2_a", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf2_a", "now() - interval '1 minute'", 0);
    enqueue(&mut admin, "rf2_b", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf2_a")), vec![first], "a's first claim: its place is at the first job");
    b.batch_execute(&format!("BEGIN; SELECT count(*) FROM ({}) q; SAVEPOINT look", claim_of("b", 1, "rf2_other")))
        .expect("b claims in its transaction first");
    let failed = b.query("SELECT task_id FROM distlock.consume_tasks(3, 'doomed', p_queues => ARRAY['rf2_a', 'rf2_b'])", &[]);
    assert!(failed.is_err(), "b's look fails in rf2_b after claiming rf2_a's two jobs");
    b.batch_execute("ROLLBACK TO SAVEPOINT look").expect("the look rolled back");
    assert_eq!(pending(&mut admin, &[j1, j2]), 2, "the look's jobs are runnable again");
    let next = claimed(&mut b, &claim_of("b", 1, "rf2_a"));
    b.batch_execute("COMMIT").expect("b commits");
    // Fixed: the savepoint's abort logged its jobs and made b forget its
    // place, so b starts before j1.
    assert_eq!(next, vec![j1], "b's next claim starts before the jobs its rolled-back look gave back");
    let got = claimed(&mut a, &claim_of("a", 2, "rf2_a"));
    assert_eq!(got, vec![j2], "a claims the other runnable job; it got {got:?}: it started past it");
}

/// A claim prepared (PREPARE TRANSACTION) no longer publishes, but the
/// backend's own place, set at the last of its jobs by that claim,
/// survives the PREPARE (forget_on_abort runs only if this backend
/// aborts). ROLLBACK PREPARED gives the jobs back with no log entry; the
/// backend's next claim starts at its place (taking the last job, stepping
/// over the one before) and publishes that end: every backend then steps
/// over the job before it.
#[test]
fn review_frontier2_rollback_prepared_then_the_preparing_backend_publishes_past_its_jobs() {
    let db = fresh_db("review_frontier2_prepared_self");
    let mut admin = connect(&db);
    if scalar(&mut admin, "SHOW max_prepared_transactions").as_deref() == Some("0") {
        eprintln!("skipped: max_prepared_transactions is 0 on this cluster");
        return;
    }
    let first = enqueue(&mut admin, "rf2_p", "now() - interval '3 minutes'", 0);
    let j1 = enqueue(&mut admin, "rf2_p", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf2_p", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf2_p")), vec![first], "a's first claim");
    b.batch_execute(&format!(
        "BEGIN; SELECT count(*) FROM ({}) q; PREPARE TRANSACTION 'review_frontier2_self'",
        claim_of("prepared", 2, "rf2_p")
    ))
    .expect("a prepared claim of the two other jobs");
    admin.batch_execute("ROLLBACK PREPARED 'review_frontier2_self'").expect("rollback prepared");
    assert_eq!(pending(&mut admin, &[j1, j2]), 2, "the prepared claim's jobs are runnable again");
    // Fixed: b forgot its place at PREPARE, so it starts before j1.
    assert_eq!(claimed(&mut b, &claim_of("b", 1, "rf2_p")), vec![j1], "b's next claim starts before the jobs given back");
    let got = claimed(&mut a, &claim_of("a", 2, "rf2_p"));
    assert_eq!(got, vec![j2], "a claims the other runnable job; it got {got:?}: it started past it");
}

/// A prepared claim holds its jobs; another consumer skips them, claims
/// the next and publishes; ROLLBACK PREPARED gives them back with no log
/// entry, behind that frontier.
#[test]
fn review_frontier2_rollback_prepared_gives_back_jobs_another_consumer_published_past() {
    let db = fresh_db("review_frontier2_prepared_other");
    let mut admin = connect(&db);
    if scalar(&mut admin, "SHOW max_prepared_transactions").as_deref() == Some("0") {
        eprintln!("skipped: max_prepared_transactions is 0 on this cluster");
        return;
    }
    let first = enqueue(&mut admin, "rf2_q", "now() - interval '3 minutes'", 0);
    let j1 = enqueue(&mut admin, "rf2_q", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf2_q", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    let mut c = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf2_q")), vec![first], "a's first claim");
    b.batch_execute(&format!(
        "BEGIN; SELECT count(*) FROM ({}) q; PREPARE TRANSACTION 'review_frontier2_other'",
        claim_of("prepared", 2, "rf2_q")
    ))
    .expect("a prepared claim of the two other jobs");
    let later = enqueue(&mut admin, "rf2_q", "now() - interval '30 seconds'", 0);
    assert_eq!(claimed(&mut c, &claim_of("c", 1, "rf2_q")), vec![later], "c skips the jobs the prepared claim holds");
    admin.batch_execute("ROLLBACK PREPARED 'review_frontier2_other'").expect("rollback prepared");
    assert_eq!(pending(&mut admin, &[j1, j2]), 2, "the prepared claim's jobs are runnable again");
    let got = claimed(&mut a, &claim_of("a", 2, "rf2_q"));
    assert_eq!(got, vec![j1, j2], "a claims both runnable jobs; it got {got:?}: it started at c's frontier, after them");
}

/// A job enqueued in a prepared transaction is invisible until COMMIT
/// PREPARED, which writes no runnable log entry (wake.rs only wakes
/// sleepers at the PREPARE). A consumer that claims past its place
/// meanwhile publishes that end: every backend then steps over the job.
/// On main only the consumers whose own claims passed it did.
#[test]
fn review_frontier2_a_job_enqueued_by_commit_prepared_lies_behind_the_frontier() {
    let db = fresh_db("review_frontier2_commit_prepared");
    let mut admin = connect(&db);
    if scalar(&mut admin, "SHOW max_prepared_transactions").as_deref() == Some("0") {
        eprintln!("skipped: max_prepared_transactions is 0 on this cluster");
        return;
    }
    let first = enqueue(&mut admin, "rf2_e", "now() - interval '3 minutes'", 0);
    let mut a = connect(&db);
    let mut producer = connect(&db);
    let mut c = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf2_e")), vec![first], "a's first claim");
    producer
        .batch_execute(
            "BEGIN; SELECT distlock.enqueue_task('job', '{}', now() - interval '2 minutes', 0, 5, 'rf2_e'); \
             PREPARE TRANSACTION 'review_frontier2_enqueue'",
        )
        .expect("a prepared enqueue");
    let later = enqueue(&mut admin, "rf2_e", "now() - interval '30 seconds'", 0);
    assert_eq!(claimed(&mut c, &claim_of("c", 1, "rf2_e")), vec![later], "c claims the job after the prepared one");
    admin.batch_execute("COMMIT PREPARED 'review_frontier2_enqueue'").expect("commit prepared");
    let hidden: i64 = admin
        .query_one("SELECT id FROM distlock.task_queue WHERE queue = 'rf2_e' AND status = 'pending'", &[])
        .expect("the prepared job, runnable")
        .get(0);
    let got = claimed(&mut a, &claim_of("a", 1, "rf2_e"));
    assert_eq!(got, vec![hidden], "a claims the runnable job; it got {got:?}: it started at c's frontier, after it");
}

/// The design note's bound for jobs a user locked and let go unchanged:
/// "every backend then steps over those jobs until its next read from the
/// head, within a second". A consumer that waits (p_wait) looks once,
/// starting at the frontier, finds nothing and sleeps: nothing wakes it
/// (the user's ROLLBACK commits nothing), so its next read from the head
/// comes at the end of its wait (or the 60 s horizon of next_due). On main
/// its look starts at its own place and claims the jobs at once.
#[test]
fn review_frontier2_a_waiting_consumer_sleeps_past_jobs_a_user_let_go() {
    let db = fresh_db("review_frontier2_waiting");
    let mut admin = connect(&db);
    let first = enqueue(&mut admin, "rf2_w", "now() - interval '3 minutes'", 0);
    let j1 = enqueue(&mut admin, "rf2_w", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf2_w", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    let mut user = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf2_w")), vec![first], "a's first claim");
    user.batch_execute(&format!("BEGIN; SELECT * FROM distlock.task_queue WHERE id IN ({j1}, {j2}) FOR UPDATE"))
        .expect("the user's lock");
    let later = enqueue(&mut admin, "rf2_w", "now() - interval '30 seconds'", 0);
    assert_eq!(claimed(&mut b, &claim_of("b", 1, "rf2_w")), vec![later], "b skips the rows the user holds");
    user.batch_execute("ROLLBACK").expect("the user lets go");
    let started = Instant::now();
    let got = claimed(
        &mut a,
        "SELECT task_id FROM distlock.consume_tasks(2, 'a', p_wait => '12 seconds', p_queues => ARRAY['rf2_w'])",
    );
    let took = started.elapsed();
    assert_eq!(got, vec![j1, j2], "a's wait ends with both jobs");
    assert!(
        took < Duration::from_secs(3),
        "a waited {took:?} for two jobs runnable all along (the note's bound: within a second)"
    );
}
