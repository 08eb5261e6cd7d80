//! The cumulative queue counters (issue 47, item 3): they count committed
//! work only, never fall, are per database, and follow the caller's
//! monitor scope. On the primary (shared memory, preloaded or from the DSM
//! registry as the run says); the plain cluster has shared memory too on
//! 17+ (the DSM registry), and on 15 none: there the function raises 55000.

use crate::support::*;

/// (claimed, completed, failed, dead, taken_over, expired, wait_count) of
/// `queue`, zeros when the queue has no entry.
fn counts(c: &mut Client, queue: &str) -> [i64; 7] {
    let rows = c
        .query(
            "SELECT claimed, completed, failed, dead, taken_over, expired, wait_count \
               FROM distlock.queue_counters() WHERE queue = $1",
            &[&queue],
        )
        .expect("queue_counters");
    match rows.first() {
        Some(r) => [r.get(0), r.get(1), r.get(2), r.get(3), r.get(4), r.get(5), r.get(6)],
        None => [0; 7],
    }
}

fn enqueue(c: &mut Client, queue: &str, max_attempts: i32) -> i64 {
    c.query_one(
        "SELECT distlock.enqueue_task('job', '{}', now(), 0, $2, $1)",
        &[&queue, &max_attempts],
    )
    .expect("enqueue")
    .get(0)
}

fn claim(c: &mut Client, queue: &str, lease: &str) -> Option<(i64, i32)> {
    c.query_opt(
        &format!("SELECT task_id, attempts FROM distlock.consume_task('w', '{lease}', NULL, ARRAY[$1])"),
        &[&queue],
    )
    .expect("claim")
    .map(|r| (r.get(0), r.get(1)))
}

#[test]
fn counters_count_committed_work_only_and_never_fall() {
    let db = fresh_db("queue_counters_committed");
    let mut c = connect(&db);
    let mut watcher = connect(&db);
    let q = "counted";

    // A claim rolled back counts nothing.
    let job = enqueue(&mut c, q, 2);
    c.batch_execute("BEGIN").expect("begin");
    assert!(claim(&mut c, q, "1 hour").is_some());
    assert_eq!(counts(&mut watcher, q), [0; 7], "another session sees no uncommitted claim");
    c.batch_execute("ROLLBACK").expect("rollback");
    assert_eq!(counts(&mut c, q), [0; 7], "a rolled-back claim is not counted");

    // A claim rolled back to a savepoint counts nothing; the one after it does.
    c.batch_execute("BEGIN; SAVEPOINT a").expect("savepoint");
    assert!(claim(&mut c, q, "1 hour").is_some());
    c.batch_execute("SAVEPOINT b").expect("nested");
    c.batch_execute("ROLLBACK TO SAVEPOINT a").expect("rollback to a");
    assert_eq!(claim(&mut c, q, "1 hour").map(|(id, _)| id), Some(job));
    assert_eq!(counts(&mut watcher, q)[0], 0, "not before commit");
    c.batch_execute("COMMIT").expect("commit");
    assert_eq!(counts(&mut watcher, q), [1, 0, 0, 0, 0, 0, 1], "one committed claim, its wait counted");

    // A failure (retried), then a takeover of an expired lease, a failure
    // that uses the last attempt (dead).
    c.batch_execute(&format!("SELECT distlock.fail_task({job}, 'boom', 'w')")).expect("fail");
    c.batch_execute(&format!("UPDATE distlock.task_queue SET run_after = now() WHERE id = {job}")).expect("due now");
    assert_eq!(claim(&mut c, q, "1 second").map(|(id, _)| id), Some(job));
    c.batch_execute("SELECT pg_sleep(1.2)").expect("lease runs out");
    // max_attempts 2 and two attempts made: the takeover makes it dead.
    assert!(claim(&mut c, q, "1 hour").is_none());
    assert_eq!(counts(&mut c, q), [2, 0, 1, 1, 0, 0, 2]);

    // Retrying the dead job lowers nothing; it is claimed and completed.
    c.batch_execute(&format!("SELECT distlock.retry_dead_jobs('{q}', ARRAY[{job}]::bigint[])")).expect("retry");
    assert_eq!(counts(&mut c, q), [2, 0, 1, 1, 0, 0, 2], "a retried dead job leaves the counters as they were");
    let (id, attempt) = claim(&mut c, q, "1 hour").expect("retried job");
    c.batch_execute(&format!("SELECT distlock.complete_task({id}, 'w', {attempt})")).expect("complete");
    // A completion rolled back counts nothing.
    let other = enqueue(&mut c, q, 5);
    let (_, attempt) = claim(&mut c, q, "1 hour").expect("other");
    c.batch_execute(&format!("BEGIN; SELECT distlock.complete_task({other}, 'w', {attempt}); ROLLBACK"))
        .expect("rolled-back completion");
    assert_eq!(counts(&mut c, q), [4, 1, 1, 1, 0, 0, 4]);

    // A lease that runs out and is taken over by another consumer's claim.
    c.batch_execute(&format!("UPDATE distlock.task_queue SET lease_expires_at = now() WHERE id = {other}"))
        .expect("expire");
    assert_eq!(claim(&mut watcher, q, "1 hour").map(|(id, _)| id), Some(other));
    let after = counts(&mut c, q);
    assert_eq!(after, [5, 1, 1, 1, 1, 0, 4], "a takeover is a claim, without a wait");

    // Pruning finished jobs lowers nothing.
    c.batch_execute("SELECT distlock.prune_jobs('0 seconds')").expect("prune");
    assert_eq!(counts(&mut c, q), after);
}

#[test]
fn a_prepared_transaction_is_not_counted() {
    let db = fresh_db("queue_counters_prepared");
    let mut c = connect(&db);
    if scalar(&mut c, "SHOW max_prepared_transactions").as_deref() == Some("0") {
        eprintln!("skipped: max_prepared_transactions is 0 on this cluster");
        return;
    }
    enqueue(&mut c, "prepared", 3);
    c.batch_execute("BEGIN").expect("begin");
    assert!(claim(&mut c, "prepared", "1 hour").is_some());
    c.batch_execute("PREPARE TRANSACTION 'queue_counters'").expect("prepare");
    // Committed from another session, as a transaction manager may.
    connect(&db).batch_execute("COMMIT PREPARED 'queue_counters'").expect("commit prepared");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_queue WHERE status = 'processing'"), 1, "the claim committed");
    assert_eq!(counts(&mut c, "prepared"), [0; 7], "work of a prepared transaction is left out (docs/metrics.md)");
    // The session's next transaction counts as usual.
    enqueue(&mut c, "prepared", 3);
    assert!(claim(&mut c, "prepared", "1 hour").is_some());
    assert_eq!(counts(&mut c, "prepared")[0], 1);
}

#[test]
fn counters_are_per_database_and_follow_the_monitor_scope() {
    let db = fresh_db("queue_counters_scope");
    let other = fresh_db("queue_counters_scope_other");
    let mut c = connect(&db);
    let mut o = connect(&other);
    for queue in ["a.mail", "b.mail"] {
        enqueue(&mut c, queue, 3);
        assert!(claim(&mut c, queue, "1 hour").is_some());
    }
    assert_eq!(count(&mut o, "SELECT 1 FROM distlock.queue_counters()"), 0, "another database has its own");
    ensure_role(&mut c, "queue_counters_a");
    c.batch_execute("SELECT distlock.grant_capability('queue_counters_a', 'monitor', 'a.')").expect("scoped");
    let seen = as_role(&mut c, "queue_counters_a", |c| {
        c.query("SELECT queue FROM distlock.queue_counters()", &[]).expect("read")
            .iter()
            .map(|r| r.get::<_, String>(0))
            .collect::<Vec<_>>()
    });
    assert_eq!(seen, ["a.mail"]);
    refused(&mut c, "queue_counters_a", "SELECT distlock.reset_queue_counters()");
    // An admin's reset zeroes one queue, or all, of this database only.
    assert_eq!(scalar(&mut c, "SELECT distlock.reset_queue_counters('a.mail')").as_deref(), Some("1"));
    assert_eq!(counts(&mut c, "a.mail")[0], 0);
    assert_eq!(counts(&mut c, "b.mail")[0], 1);
    // A long name is kept cut on a character boundary, and marked so.
    let long = format!("{}é", "x".repeat(127));
    enqueue(&mut c, &long, 3);
    assert!(claim(&mut c, &long, "1 hour").is_some());
    let row = c
        .query_one("SELECT queue, queue_complete, claimed FROM distlock.queue_counters() WHERE queue LIKE 'xxx%'", &[])
        .expect("long name");
    assert_eq!((row.get::<_, String>(0), row.get::<_, bool>(1), row.get::<_, i64>(2)), ("x".repeat(127), false, 1));
}
