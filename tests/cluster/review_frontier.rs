//! Review of the shared claim frontier (commit 44206ec,
//! src/shared/claim_frontier.rs). The frontier is published by
//! `claim_start::claimed` at the moment the claim statement returns, before
//! its transaction ends, and every other backend then starts at it. The
//! argument for it: any job made runnable before the frontier afterwards
//! writes a runnable log entry. Each test here makes jobs runnable before a
//! published frontier with no log entry, through a path that the
//! publishing backend's own place survives (forget_on_abort, its own
//! place alone being ahead) but the shared frontier does not: every other
//! unscoped backend of the queue then steps over those jobs, and a claim
//! returns fewer jobs than are runnable. Each passes on main (a0cb6f3),
//! where a backend starts at its own place only.

use crate::review_46_7::enqueue;
use crate::support::*;

/// The ids `claim` (a statement returning task_id) returned, sorted.
/// (Shared by the later frontier reviews' tests.)
pub(crate) fn claimed(c: &mut Client, claim: &str) -> Vec<i64> {
    let mut ids: Vec<i64> =
        c.query(claim, &[]).unwrap_or_else(|e| panic!("{claim}: {e}")).iter().map(|row| row.get(0)).collect();
    ids.sort_unstable();
    ids
}

pub(crate) fn claim_of(worker: &str, batch: i32, queue: &str) -> String {
    format!("SELECT task_id FROM distlock.consume_tasks({batch}, '{worker}', p_queues => ARRAY['{queue}'])")
}

/// How many of `ids` are pending.
pub(crate) fn pending(c: &mut Client, ids: &[i64]) -> i64 {
    let list = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    count(c, &format!("SELECT 1 FROM distlock.task_queue WHERE id IN ({list}) AND status = 'pending'"))
}

/// Whether `sql` failed on `c`, once its transaction has ended. The server
/// sends the error before it aborts the transaction (and lets go of the
/// row locks of the jobs it claimed): another connection acting on the
/// error at once still finds those jobs locked and skips them. A statement
/// after it on the same connection runs only once the abort is done.
pub(crate) fn failed_and_ended(c: &mut Client, sql: &str) -> bool {
    let failed = c.query(sql, &[]).is_err();
    c.batch_execute("SELECT 1").expect("the connection after the failed statement");
    failed
}

/// A look that claims from one queue and then fails before it returns (a
/// statement_timeout, a cancel, lock_timeout, running out of memory or a
/// unique violation in its claim of the next queue: here a trigger on that
/// claim raises) publishes its first queue's end as the frontier, and its
/// jobs are runnable again once it rolls back. consume.rs registers the
/// abort's runnable log entry (wake::jobs_claimed) only after the whole
/// look, so nothing is logged; the failing backend itself starts from the
/// head again (forget_on_abort), but every other backend now starts at the
/// frontier, after the given-back jobs. Here consumer a, whose own place is
/// before both, then claims one of the two runnable jobs.
#[test]
fn review_frontier_a_look_failing_after_its_first_queue_leaves_its_jobs_behind_the_frontier() {
    let db = fresh_db("review_frontier_failed_look");
    let mut admin = connect(&db);
    admin
        .batch_execute(
            "CREATE FUNCTION public.review_frontier_fail() RETURNS trigger LANGUAGE plpgsql AS
               $$BEGIN RAISE EXCEPTION 'the look fails in its second queue'; END$$;
             CREATE TRIGGER review_frontier_fail AFTER INSERT ON distlock.task_queue FOR EACH ROW
               WHEN (NEW.worker_id = 'doomed' AND NEW.queue = 'rf_b') EXECUTE FUNCTION public.review_frontier_fail();",
        )
        .expect("the fault");
    let first = enqueue(&mut admin, "rf_a", "now() - interval '3 minutes'", 0);
    let j1 = enqueue(&mut admin, "rf_a", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf_a", "now() - interval '1 minute'", 0);
    enqueue(&mut admin, "rf_b", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf_a")), vec![first], "a's first claim: its place is at the first job");
    let failed = failed_and_ended(&mut b, "SELECT task_id FROM distlock.consume_tasks(3, 'doomed', p_queues => ARRAY['rf_a', 'rf_b'])");
    assert!(failed, "b's look fails in rf_b after claiming rf_a's two jobs");
    assert_eq!(
        count(&mut admin, "SELECT 1 FROM distlock.task_queue WHERE queue = 'rf_a' AND status = 'pending'"),
        2,
        "the failed look's jobs are runnable again"
    );
    let got = claimed(&mut a, &claim_of("a", 2, "rf_a"));
    assert_eq!(got, vec![j1, j2], "a claims both runnable jobs; it got {got:?}: it started at the failed look's frontier");
}

/// A claim in a transaction that is then prepared publishes its end as the
/// frontier; ROLLBACK PREPARED gives its jobs back and writes no runnable
/// log entry (documented: a gap the per-backend read from the head covers,
/// for the backend that prepared, which nobody else followed). With the
/// frontier every other backend follows it: a, whose own place is before
/// the given-back jobs and whose log says nothing new, starts after them.
#[test]
fn review_frontier_rollback_prepared_leaves_its_jobs_behind_every_backend() {
    let db = fresh_db("review_frontier_prepared");
    let mut admin = connect(&db);
    if scalar(&mut admin, "SHOW max_prepared_transactions").as_deref() == Some("0") {
        eprintln!("skipped: max_prepared_transactions is 0 on this cluster");
        return;
    }
    let first = enqueue(&mut admin, "rf_p", "now() - interval '3 minutes'", 0);
    let j1 = enqueue(&mut admin, "rf_p", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf_p", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf_p")), vec![first], "a's first claim");
    b.batch_execute(&format!(
        "BEGIN; SELECT count(*) FROM ({}) q; PREPARE TRANSACTION 'review_frontier_prepared'",
        claim_of("prepared", 2, "rf_p")
    ))
    .expect("a prepared claim of the two other jobs");
    admin.batch_execute("ROLLBACK PREPARED 'review_frontier_prepared'").expect("rollback prepared");
    let got = claimed(&mut a, &claim_of("a", 2, "rf_p"));
    assert_eq!(got, vec![j1, j2], "a claims both runnable jobs; it got {got:?}: it started at the prepared claim's frontier");
}

/// purge_queue rolled back: while it runs, the jobs it deletes are locked,
/// and a claim skips them (SKIP LOCKED) and publishes a frontier after
/// them. The purge's rollback makes them runnable again, as they always
/// were, and nothing writes a log entry (nothing became runnable). Only
/// the claim that skipped them stepped over them before the frontier; now
/// every backend does. Any transaction that locks runnable rows and ends
/// without making them unrunnable does the same (an admin's
/// `SELECT ... FOR UPDATE` of a job to look at it, an UPDATE of a payload
/// rolled back).
#[test]
fn review_frontier_a_purge_rolled_back_leaves_its_jobs_behind_the_frontier() {
    let db = fresh_db("review_frontier_purge");
    let mut admin = connect(&db);
    let first = enqueue(&mut admin, "rf_c", "now() - interval '3 minutes'", 0);
    let j1 = enqueue(&mut admin, "rf_c", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf_c", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    let mut purger = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf_c")), vec![first], "a's first claim");
    purger.batch_execute("BEGIN; SELECT distlock.purge_queue('rf_c')").expect("a purge, not yet committed");
    let later = enqueue(&mut admin, "rf_c", "now() - interval '30 seconds'", 0);
    assert_eq!(claimed(&mut b, &claim_of("b", 1, "rf_c")), vec![later], "b skips the rows the purge holds");
    purger.batch_execute("ROLLBACK").expect("the purge rolled back");
    let got = claimed(&mut a, &claim_of("a", 2, "rf_c"));
    assert_eq!(got, vec![j1, j2], "a claims both runnable jobs; it got {got:?}: it started at b's frontier");
}

/// The same for the frontier of every queue (key 0): a consumer of every
/// queue claims from the queues without a limit first (publishing), then
/// from a limited queue in its turn (consume.rs), where its look fails.
#[test]
fn review_frontier_a_look_of_every_queue_failing_in_a_limited_queue_leaves_its_jobs_behind() {
    let db = fresh_db("review_frontier_failed_every");
    let mut admin = connect(&db);
    admin
        .batch_execute(
            "CREATE FUNCTION public.review_frontier_fail() RETURNS trigger LANGUAGE plpgsql AS
               $$BEGIN RAISE EXCEPTION 'the look fails in the limited queue'; END$$;
             CREATE TRIGGER review_frontier_fail AFTER INSERT ON distlock.task_queue FOR EACH ROW
               WHEN (NEW.worker_id = 'doomed' AND NEW.queue = 'rf_limited') EXECUTE FUNCTION public.review_frontier_fail();
             SELECT distlock.set_queue_limit('rf_limited', 5);",
        )
        .expect("the fault, and a limited queue");
    let first = enqueue(&mut admin, "rf_e", "now() - interval '3 minutes'", 0);
    let j1 = enqueue(&mut admin, "rf_e", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf_e", "now() - interval '1 minute'", 0);
    enqueue(&mut admin, "rf_limited", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    let every = |worker: &str, batch: i32| format!("SELECT task_id FROM distlock.consume_tasks({batch}, '{worker}')");
    assert_eq!(claimed(&mut a, &every("a", 1)), vec![first], "a's first claim of every queue");
    let failed = failed_and_ended(&mut b, &every("doomed", 3));
    assert!(failed, "b's look fails in the limited queue after claiming rf_e's two jobs");
    assert_eq!(
        count(&mut admin, "SELECT 1 FROM distlock.task_queue WHERE queue = 'rf_e' AND status = 'pending'"),
        2,
        "the failed look's jobs are runnable again"
    );
    let got = claimed(&mut a, &every("a", 2));
    assert_eq!(got, vec![j1, j2], "a claims the two runnable jobs of rf_e first; it got {got:?}");
}

/// What no claim's record tells of: a transaction of the user's that locks
/// runnable jobs (here `SELECT ... FOR UPDATE`; a foreign key's KEY SHARE
/// lock does the same) and ends without changing them. Claims skip them
/// and the shared frontier passes them, so every backend steps over them
/// until its next read from the head: within HEAD_EVERY_WITH_LOG_US (a
/// second) with no snapshot held, the bound docs/design/queue-storage.md
/// states (up to a minute while one is held).
#[test]
fn review_frontier_jobs_a_user_locked_and_let_go_are_claimed_by_the_next_read_from_the_head() {
    let db = fresh_db("review_frontier_user_lock");
    let mut admin = connect(&db);
    let first = enqueue(&mut admin, "rf_u", "now() - interval '3 minutes'", 0);
    let j1 = enqueue(&mut admin, "rf_u", "now() - interval '2 minutes'", 0);
    let j2 = enqueue(&mut admin, "rf_u", "now() - interval '1 minute'", 0);
    let mut a = connect(&db);
    let mut b = connect(&db);
    let mut user = connect(&db);
    assert_eq!(claimed(&mut a, &claim_of("a", 1, "rf_u")), vec![first], "a's first claim");
    user.batch_execute(&format!("BEGIN; SELECT * FROM distlock.task_queue WHERE id IN ({j1}, {j2}) FOR UPDATE"))
        .expect("the user's lock");
    let later = enqueue(&mut admin, "rf_u", "now() - interval '30 seconds'", 0);
    assert_eq!(claimed(&mut b, &claim_of("b", 1, "rf_u")), vec![later], "b skips the rows the user holds");
    user.batch_execute("ROLLBACK").expect("the user lets go");
    let started = std::time::Instant::now();
    let mut got = Vec::new();
    while got.len() < 2 {
        got.extend(claimed(&mut a, &claim_of("a", 2, "rf_u")));
        assert!(started.elapsed() < std::time::Duration::from_secs(3), "a found only {got:?} of [{j1}, {j2}] in 3 s");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    got.sort();
    assert_eq!(got, vec![j1, j2]);
}
