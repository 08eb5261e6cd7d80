//! Third review of the shared claim frontier (f083d8b: abort entries per
//! claim statement, places forgotten per savepoint and at PREPARE, the
//! prepared-transaction epoch, a look from the backend's own place before a
//! waiting consumer sleeps). Each test but the last makes consumer a, whose
//! own place (after its first job) lies before some runnable jobs that no
//! runnable log entry tells of, claim at once: with a starting at its own
//! place it claims them; here it starts at a frontier someone published past
//! them and claims nothing. The last shows a waiting consumer that keeps
//! claiming sleep past such jobs for its whole wait.

use std::time::{Duration, Instant};

use crate::review_46_7::enqueue;
use crate::review_frontier::{claim_of, claimed, pending};
use crate::support::*;


fn no_prepared_transactions(admin: &mut Client) -> bool {
    if scalar(admin, "SHOW max_prepared_transactions").as_deref() == Some("0") {
        eprintln!("skipped: max_prepared_transactions is 0 on this cluster");
        return true;
    }
    false
}

/// Fix 1 registers a claim statement's abort entry right after the
/// statement returns (claim.rs, wake::claim_given_back_on_abort), so a
/// statement that fails after it locked its jobs (cancelled or timed out
/// while it runs, an error in its own deferred work or in reading its rows
/// back) gives them back with no entry, as the whole look did before. Here
/// b's claim statement has taken rf3_c's two jobs and is held (an AFTER
/// trigger waiting on an advisory lock: the stand-in for a slow statement);
/// c skips the held jobs, claims the next and publishes its end; b's
/// statement is cancelled. a, whose place lies before the jobs, then starts
/// at c's frontier and claims nothing.
#[test]
fn review_frontier3_a_claim_statement_cancelled_after_it_locked_its_jobs_gives_them_back_behind_the_frontier() {
    let db = fresh_db("review_frontier3_cancelled_statement");
    let mut admin = connect(&db);
    admin
        .batch_execute(
            "CREATE FUNCTION public.review_frontier3_pause() RETURNS trigger LANGUAGE plpgsql AS
               $$BEGIN PERFORM pg_advisory_xact_lock(4343); RETURN NULL; END$$;
             CREATE TRIGGER review_frontier3_pause AFTER INSERT ON distlock.task_queue FOR EACH ROW
               WHEN (NEW.worker_id = 'slow') EXECUTE FUNCTION public.review_frontier3_pause();",
        )
        .expect("the pause");
    let j1 = enqueue(&mut admin, "rf3_c", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf3_c", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    let mut c = connect(&db);
    let b_pid = backend_pid(&mut b);
    admin.batch_execute("SELECT pg_advisory_lock(4343)").expect("hold b's claim statement");
    let statement = std::thread::spawn(move || {
        let result = b.query(&claim_of("slow", 2, "rf3_c"), &[]);
        result.err().and_then(|e| e.code().map(|code| code.code().to_string()))
    });
    eventually("b's claim statement to hold rf3_c's jobs and wait", Duration::from_secs(10), || {
        count(&mut admin, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 4343 AND NOT granted") == 1
    });
    // a's first claim, right before the rest: its place is at the first job.
    let first = enqueue(&mut admin, "rf3_c", "now() - interval '3 minutes'", 0);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf3_c")), vec![first], "a's first claim (b's statement holds j1, j2)");
    let later = enqueue(&mut admin, "rf3_c", "now() - interval '30 seconds'", 0);
    assert_eq!(claimed(&mut c, &claim_of("c", 1, "rf3_c")), vec![later], "c skips the jobs b's statement holds");
    admin.batch_execute(&format!("SELECT pg_cancel_backend({b_pid})")).expect("cancel b's claim statement");
    assert_eq!(statement.join().expect("b's statement").as_deref(), Some("57014"), "b's claim statement is cancelled");
    admin.batch_execute("SELECT pg_advisory_unlock(4343)").expect("unlock");
    assert_eq!(pending(&mut admin, &[j1, j2]), 2, "b's jobs are runnable again");
    let got = claimed(&mut a, &claim_of("a", 2, "rf3_c"));
    assert_eq!(got, vec![j1, j2], "a claims both runnable jobs; it got {got:?}: it started at c's frontier, after them");
}

/// Fix 3 keeps claims that begin while a prepared transaction that changed
/// the queue is in progress from publishing, but not the places they
/// found: c's own place, found while b's prepared claim held j1 and j2,
/// lies past them. After ROLLBACK PREPARED (no log entry) c's next claim
/// begins with nothing prepared, starts at that place, and publishes its
/// end under the new epoch: every backend then steps over j1 and j2. On
/// main only c did.
#[test]
fn review_frontier3_a_place_found_while_a_claim_was_prepared_publishes_past_its_jobs_after_rollback_prepared() {
    let db = fresh_db("review_frontier3_prepared_place");
    let mut admin = connect(&db);
    if no_prepared_transactions(&mut admin) {
        return;
    }
    let j1 = enqueue(&mut admin, "rf3_p", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf3_p", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    let mut c = connect(&db);
    b.batch_execute(&format!(
        "BEGIN; SELECT count(*) FROM ({}) q; PREPARE TRANSACTION 'review_frontier3_place'",
        claim_of("prepared", 2, "rf3_p")
    ))
    .expect("a prepared claim of j1 and j2");
    let first = enqueue(&mut admin, "rf3_p", "now() - interval '3 minutes'", 0);
    let later = enqueue(&mut admin, "rf3_p", "now() - interval '30 seconds'", 0);
    let later2 = enqueue(&mut admin, "rf3_p", "now() - interval '20 seconds'", 0);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf3_p")), vec![first], "a's first claim: its place is at the first job");
    assert_eq!(claimed(&mut c, &claim_of("c", 1, "rf3_p")), vec![later], "c skips the jobs the prepared claim holds");
    admin.batch_execute("ROLLBACK PREPARED 'review_frontier3_place'").expect("rollback prepared");
    assert_eq!(pending(&mut admin, &[j1, j2]), 2, "the prepared claim's jobs are runnable again");
    assert_eq!(claimed(&mut c, &claim_of("c", 1, "rf3_p")), vec![later2], "c's next claim starts at its own place");
    let got = claimed(&mut a, &claim_of("a", 2, "rf3_p"));
    assert_eq!(got, vec![j1, j2], "a claims both runnable jobs; it got {got:?}: it started at c's frontier, after them");
}

/// The same with a prepared enqueue: c's place, found while the job was
/// invisible, lies past it; after COMMIT PREPARED c's next claim publishes
/// its end past the job.
#[test]
fn review_frontier3_a_place_found_while_an_enqueue_was_prepared_publishes_past_its_job_after_commit_prepared() {
    let db = fresh_db("review_frontier3_prepared_enqueue");
    let mut admin = connect(&db);
    if no_prepared_transactions(&mut admin) {
        return;
    }
    let mut a = connect(&db);
    let mut producer = connect(&db);
    let mut c = connect(&db);
    producer
        .batch_execute(
            "BEGIN; SELECT distlock.enqueue_task('job', '{}', now() - interval '2 minutes', 0, 5, 'rf3_e'); \
             PREPARE TRANSACTION 'review_frontier3_enqueue'",
        )
        .expect("a prepared enqueue");
    let first = enqueue(&mut admin, "rf3_e", "now() - interval '3 minutes'", 0);
    let later = enqueue(&mut admin, "rf3_e", "now() - interval '30 seconds'", 0);
    let later2 = enqueue(&mut admin, "rf3_e", "now() - interval '20 seconds'", 0);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf3_e")), vec![first], "a's first claim: its place is at the first job");
    assert_eq!(claimed(&mut c, &claim_of("c", 1, "rf3_e")), vec![later], "c claims the job after the prepared one");
    admin.batch_execute("COMMIT PREPARED 'review_frontier3_enqueue'").expect("commit prepared");
    let hidden: i64 = admin
        .query_one("SELECT id FROM distlock.task_queue WHERE queue = 'rf3_e' AND id <> ALL($1) AND status = 'pending'", &[&vec![later2]])
        .expect("the prepared job, runnable")
        .get(0);
    assert_eq!(claimed(&mut c, &claim_of("c", 1, "rf3_e")), vec![later2], "c's next claim starts at its own place");
    let got = claimed(&mut a, &claim_of("a", 1, "rf3_e"));
    assert_eq!(got, vec![hidden], "a claims the runnable job; it got {got:?}: it started at c's frontier, after it");
}

/// The frontier's table of prepared transactions lives in shared memory,
/// which a crash restart (or any restart) makes anew, empty, while the
/// prepared transactions themselves survive it. b's prepared claim holds
/// j1 and j2 across a crash restart; c then claims past them and publishes
/// (nothing recorded, epoch 0); ROLLBACK PREPARED gives them back with no
/// log entry, behind that frontier. Without the restart c would not
/// publish (review_frontier2's prepared test).
#[test]
fn review_frontier3_a_claim_prepared_before_a_crash_restart_is_not_known_to_the_frontier() {
    let db = fresh_db("review_frontier3_restart");
    let mut admin = connect(&db);
    if no_prepared_transactions(&mut admin) {
        return;
    }
    let j1 = enqueue(&mut admin, "rf3_r", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf3_r", "now() - interval '1 minute'", 0);
    let mut b = connect(&db);
    b.batch_execute(&format!(
        "BEGIN; SELECT count(*) FROM ({}) q; PREPARE TRANSACTION 'review_frontier3_restart'",
        claim_of("prepared", 2, "rf3_r")
    ))
    .expect("a prepared claim of j1 and j2");
    drop(b);
    drop(admin);
    let mut admin = crash_restart_primary(&db);
    assert_eq!(
        count(&mut admin, "SELECT 1 FROM pg_prepared_xacts WHERE gid = 'review_frontier3_restart'"),
        1,
        "the prepared claim survives the restart"
    );
    let first = enqueue(&mut admin, "rf3_r", "now() - interval '3 minutes'", 0);
    let later = enqueue(&mut admin, "rf3_r", "now() - interval '30 seconds'", 0);
    let mut a = connect(&db);
    let mut c = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf3_r")), vec![first], "a's first claim: its place is at the first job");
    assert_eq!(claimed(&mut c, &claim_of("c", 1, "rf3_r")), vec![later], "c skips the jobs the prepared claim holds");
    admin.batch_execute("ROLLBACK PREPARED 'review_frontier3_restart'").expect("rollback prepared");
    assert_eq!(pending(&mut admin, &[j1, j2]), 2, "the prepared claim's jobs are runnable again");
    let got = claimed(&mut a, &claim_of("a", 2, "rf3_r"));
    assert_eq!(got, vec![j1, j2], "a claims both runnable jobs; it got {got:?}: it started at c's frontier, after them");
}

/// Fix 4 looks again from the consumer's own place only when the look that
/// found nothing started at the frontier, and a start at the frontier that
/// finds nothing no longer becomes the backend's place; but one that finds
/// a job does. A waiting worker's loop: its first call starts at the
/// frontier (past jobs a user locked and let go, which write no log entry)
/// and returns a newer job, making that its place; its next call starts
/// there, finds nothing (the frontier is no further), and sleeps its whole
/// wait with j1 and j2 runnable. The note's bound for such jobs: a backend
/// that keeps claiming claims them within a second. On main a's own place
/// lay before them.
#[test]
fn review_frontier3_a_waiting_worker_whose_place_came_from_the_frontier_sleeps_past_jobs_a_user_let_go() {
    let db = fresh_db("review_frontier3_waiting");
    let mut admin = connect(&db);
    let first = enqueue(&mut admin, "rf3_w", "now() - interval '3 minutes'", 0);
    let j1 = enqueue(&mut admin, "rf3_w", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf3_w", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    let mut user = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf3_w")), vec![first], "a's first claim");
    user.batch_execute(&format!("BEGIN; SELECT * FROM distlock.task_queue WHERE id IN ({j1}, {j2}) FOR UPDATE"))
        .expect("the user's lock");
    let later = enqueue(&mut admin, "rf3_w", "now() - interval '30 seconds'", 0);
    assert_eq!(claimed(&mut b, &claim_of("b", 1, "rf3_w")), vec![later], "b skips the rows the user holds");
    user.batch_execute("ROLLBACK").expect("the user lets go");
    let later2 = enqueue(&mut admin, "rf3_w", "now() - interval '20 seconds'", 0);
    let started = Instant::now();
    let mut got: Vec<i64> = Vec::new();
    let wanted = [j1, j2, later2];
    while !wanted.iter().all(|id| got.contains(id)) && started.elapsed() < Duration::from_secs(20) {
        got.extend(claimed(
            &mut a,
            "SELECT task_id FROM distlock.consume_tasks(1, 'a', p_wait => '8 seconds', p_queues => ARRAY['rf3_w'])",
        ));
    }
    let took = started.elapsed();
    assert!(wanted.iter().all(|id| got.contains(id)), "a's loop claims the three runnable jobs; it got {got:?}");
    assert!(
        took < Duration::from_secs(3),
        "a's waiting loop took {took:?} to claim three jobs runnable all along (the note's bound: within a second); order {got:?}"
    );
}
