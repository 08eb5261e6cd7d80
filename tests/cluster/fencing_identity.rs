//! A session claim's token belongs to the backend that made it (issue 44,
//! items 1 and 11): once that backend lost the task's lock, no other
//! backend's hold of the lock makes the token valid again, the lost holder
//! can no longer release over the live claim, and a holder that hides its
//! claim behind a transaction left open is still timed out by the sweep.

use crate::support::*;

/// A due task; `timeout` is its run's timeout, as an interval's text.
fn task(c: &mut Client, name: &str, timeout: &str) -> i32 {
    c.query_one(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at, timeout) \
         VALUES ($1, 'job', now(), $2::text::interval) RETURNING id",
        &[&name, &timeout],
    )
    .expect("task")
    .get(0)
}

/// Claims `task_id` in session mode as `worker`; its fencing token.
pub(crate) fn claim(c: &mut Client, task_id: i32, worker: &str) -> i64 {
    let claimed: bool = c
        .query_one("SELECT distlock.try_acquire_task_lock($1, $2)", &[&task_id, &worker])
        .expect("claim")
        .get(0);
    assert!(claimed, "{worker} claims task {task_id}");
    c.query_one("SELECT current_token FROM distlock.scheduled_tasks WHERE id = $1", &[&task_id])
        .expect("token")
        .get(0)
}

/// What `check_fencing_token` answers for `token` of `task_id`.
pub(crate) fn valid(c: &mut Client, task_id: i32, token: i64) -> bool {
    c.query_one("SELECT distlock.check_fencing_token($1, $2)", &[&task_id, &token]).expect("check").get(0)
}

/// The reviewer's repro, 100 times: H claims, loses its lock to
/// `DISCARD ALL` (or `pg_advisory_unlock_all()`), W2 claims in a
/// transaction it has not committed. H's token must stay refused from every
/// connection, while W2's own token is valid to W2 once it commits.
#[test]
fn a_lost_session_claims_token_never_comes_back() {
    let db = fresh_db("fencing_identity_loop");
    let mut admin = connect(&db);
    let mut holder = connect_to(primary_port(), &db, "holder");
    let mut second = connect_to(primary_port(), &db, "second");
    let mut third = connect_to(primary_port(), &db, "third");
    let mut accepted = Vec::new();
    for i in 0..100 {
        let task_id = task(&mut admin, &format!("t{i}"), "1 hour");
        let lost = claim(&mut holder, task_id, "holder");
        assert!(valid(&mut third, task_id, lost));
        holder
            .batch_execute(if i % 2 == 0 { "DISCARD ALL" } else { "SELECT pg_advisory_unlock_all()" })
            .expect("lose the lock");
        if valid(&mut third, task_id, lost) {
            accepted.push((i, "after the lock was lost"));
        }
        second.batch_execute("BEGIN").expect("begin");
        let live = claim(&mut second, task_id, "second");
        assert!(live > lost);
        for (who, c) in [("third", &mut third), ("holder", &mut holder)] {
            if valid(c, task_id, lost) {
                accepted.push((i, if who == "third" { "by a third session" } else { "by the lost holder" }));
            }
        }
        second.batch_execute("COMMIT").expect("commit");
        if valid(&mut third, task_id, lost) {
            accepted.push((i, "after the new claim committed"));
        }
        assert!(valid(&mut third, task_id, live), "the live claim's token is valid");
        assert!(valid(&mut second, task_id, live), "the live claim's token is valid to its holder");
        second
            .execute("SELECT distlock.release_task_lock($1, 'second', 'completed')", &[&task_id])
            .expect("release");
    }
    assert!(accepted.is_empty(), "stale tokens accepted: {accepted:?}");
}

/// A holder whose lock is gone cannot release: 55000, and the task row, the
/// live claim's log row and its own stay as they were.
#[test]
fn a_holder_that_lost_its_lock_cannot_release_over_the_live_claim() {
    let db = fresh_db("fencing_identity_release");
    let mut admin = connect(&db);
    let mut holder = connect_to(primary_port(), &db, "holder");
    let mut second = connect_to(primary_port(), &db, "second");
    let task_id = task(&mut admin, "payroll", "1 hour");
    let lost = claim(&mut holder, task_id, "holder");
    holder.batch_execute("DISCARD ALL").expect("pooler reset");
    let live = claim(&mut second, task_id, "second");
    let before = scalar(
        &mut admin,
        &format!(
            "SELECT row(last_status, consecutive_failures, next_run_at, current_token, runs_failed)::text \
               FROM distlock.scheduled_tasks WHERE id = {task_id}"
        ),
    );
    let refused = holder.execute("SELECT distlock.release_task_lock($1, 'holder', 'failed', 'stale')", &[&task_id]);
    assert_eq!(sqlstate(refused), "55000", "a release by the holder that lost its lock");
    let after = scalar(
        &mut admin,
        &format!(
            "SELECT row(last_status, consecutive_failures, next_run_at, current_token, runs_failed)::text \
               FROM distlock.scheduled_tasks WHERE id = {task_id}"
        ),
    );
    assert_eq!(after, before, "the refused release changed the task row");
    assert_eq!(
        count(&mut admin, &format!("SELECT 1 FROM distlock.task_execution_log WHERE task_id = {task_id} AND status = 'running'")),
        2,
        "both log rows still running (the lost one is the sweep's to end)"
    );
    // Asked again, the session knows it holds nothing.
    let again = holder.execute("SELECT distlock.release_task_lock($1, 'holder', 'completed')", &[&task_id]);
    assert_eq!(sqlstate(again), "55000");
    // The sweep ends the lost claim's row without touching the live claim's task state.
    admin.batch_execute("SELECT * FROM distlock.check_and_recover_timeout_tasks(60)").expect("sweep");
    assert_eq!(
        scalar(&mut admin, &format!("SELECT status FROM distlock.task_execution_log WHERE fencing_token = {lost}")),
        Some("abandoned".into())
    );
    let swept = scalar(
        &mut admin,
        &format!(
            "SELECT row(last_status, consecutive_failures, next_run_at, current_token, runs_failed)::text \
               FROM distlock.scheduled_tasks WHERE id = {task_id}"
        ),
    );
    assert_eq!(swept, before, "ending the replaced claim's row changed the live claim's task row");
    assert!(valid(&mut admin, task_id, live));
    second
        .execute("SELECT distlock.release_task_lock($1, 'second', 'completed')", &[&task_id])
        .expect("the live claim releases");
}

/// `finish_claim` ends a replaced claim's row but never the task row: a
/// lease-mode claim taken over after its lease ran out, released late by
/// its old holder, is refused and changes nothing.
#[test]
fn a_release_by_a_replaced_token_changes_nothing() {
    let db = fresh_db("fencing_identity_replaced");
    let mut admin = connect(&db);
    let mut late = connect_to(primary_port(), &db, "late");
    let task_id = task(&mut admin, "lease-task", "1 hour");
    let old: i64 = late
        .query_one("SELECT distlock.try_acquire_task_lease($1, 'late', '100 milliseconds')", &[&task_id])
        .expect("lease claim")
        .get(0);
    eventually("the lease runs out", std::time::Duration::from_secs(5), || {
        !valid(&mut admin, task_id, old)
    });
    let new: i64 = admin
        .query_one("SELECT distlock.try_acquire_task_lease($1, 'next', '1 hour')", &[&task_id])
        .expect("lease claim")
        .get(0);
    assert!(new > old);
    let before = scalar(&mut admin, &format!("SELECT row(t.*)::text FROM distlock.scheduled_tasks t WHERE id = {task_id}"));
    let refused = late.execute("SELECT distlock.release_task_lease($1, $2, 'failed', 'late')", &[&task_id, &old]);
    assert_eq!(sqlstate(refused), "55000");
    let after = scalar(&mut admin, &format!("SELECT row(t.*)::text FROM distlock.scheduled_tasks t WHERE id = {task_id}"));
    assert_eq!(after, before);
}

/// Item 11: a worker runs `release_task_lock` in a transaction it leaves
/// idle past the task's timeout. Its log row is locked by that transaction,
/// so the sweep's SKIP LOCKED used to pass it over; now the sweep ends the
/// holder and times the claim out.
#[test]
fn a_holder_idle_in_its_release_transaction_is_timed_out() {
    let db = fresh_db("fencing_identity_idle_release");
    let mut admin = connect(&db);
    let mut holder = connect_to(primary_port(), &db, "idle-holder");
    let task_id = task(&mut admin, "evader", "1 second");
    let token = claim(&mut holder, task_id, "idle-holder");
    let pid = backend_pid(&mut holder);
    holder.batch_execute("BEGIN").expect("begin");
    holder
        .execute("SELECT distlock.release_task_lock($1, 'idle-holder', 'completed')", &[&task_id])
        .expect("release, left uncommitted");
    // The task's timeout is 1 second: wait until the run and the
    // transaction are both older than that.
    eventually("the holder's transaction is older than the timeout", std::time::Duration::from_secs(10), || {
        count(
            &mut admin,
            &format!("SELECT 1 FROM pg_stat_activity WHERE pid = {pid} AND xact_start < now() - interval '1.2 seconds'"),
        ) == 1
    });
    let recovered = count(
        &mut admin,
        &format!("SELECT 1 FROM distlock.check_and_recover_timeout_tasks(60) WHERE task_id = {task_id} AND lock_released"),
    );
    assert_eq!(recovered, 1, "the sweep recovered the claim its holder kept locked");
    assert_eq!(
        scalar(&mut admin, &format!("SELECT status FROM distlock.task_execution_log WHERE fencing_token = {token}")),
        Some("timed_out".into())
    );
    assert_eq!(count(&mut admin, &format!("SELECT 1 FROM pg_stat_activity WHERE pid = {pid}")), 0, "holder ended");
    assert!(!valid(&mut admin, task_id, token));
}
