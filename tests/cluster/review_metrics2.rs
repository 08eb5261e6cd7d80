//! Second review of the queue counters (branch metrics-counters, after
//! dd40ba8 and bc1b5c7): breaks written as tests that fail on the branch.

use std::time::Instant;

use crate::support::*;

/// Enqueues one job in each of `names` queues `prefix || i` and claims them
/// all (committed), `batch` claims per statement.
fn churn(c: &mut Client, prefix: &str, names: i64, batch: i64) {
    c.batch_execute(&format!(
        "SELECT pg_catalog.count(distlock.enqueue_task('job', '{{}}', p_queue => '{prefix}' || i)) \
           FROM pg_catalog.generate_series(1, {names}) i"
    ))
    .expect("enqueue churn");
    for _ in 0..(names + batch - 1) / batch {
        c.batch_execute(&format!("SELECT pg_catalog.count(*) FROM distlock.consume_tasks({batch}, 'w', '1 hour')"))
            .expect("claim churn");
    }
}

/// Break: a database that once reached its share of a partition (one churn
/// of queue names) gets no slot there for any new queue again, even after
/// `reset_queue_counters()`, which the fix says "lets a reset queue's slot
/// be taken at once": probe() stops at the first free slot it meets and
/// takes it as the candidate, the share check then refuses it (the
/// database holds its share), and its own reset (or idle) entries further
/// along the probe are never considered. With the default share (50 %) the
/// other half of every partition stays free in a one-database server, so
/// the probe almost always meets a free slot: the database's new queues go
/// to the overflow row until the server restarts.
#[test]
fn after_a_reset_a_database_at_its_share_reuses_its_own_slots() {
    let db = fresh_db("review_metrics2_reset_share");
    let mut c = connect(&db);
    churn(&mut c, "old.", 4000, 1000);
    assert!(
        count(&mut c, "SELECT 1 FROM distlock.queue_counters() WHERE queue IS NULL") == 1,
        "4000 names fill this database's share of every partition: an overflow row"
    );
    c.batch_execute("SELECT distlock.reset_queue_counters()").expect("admin reset");

    // Ten new queues, one job each.
    churn(&mut c, "new.", 10, 10);
    let named = count(&mut c, "SELECT 1 FROM distlock.queue_counters() WHERE queue LIKE 'new.%' AND claimed = 1");
    let overflow: i64 = c
        .query_one("SELECT COALESCE(pg_catalog.sum(claimed), 0)::bigint FROM distlock.queue_counters() WHERE queue IS NULL", &[])
        .expect("overflow")
        .get(0);
    c.batch_execute("SELECT distlock.reset_queue_counters()").expect("reset for later tests");
    assert_eq!(
        (named, overflow),
        (10, 0),
        "after the reset, this database's 4000 zeroed entries are free to take, yet new queues went to the overflow row"
    );
}

/// Break (cost at commit): the notes are a Vec searched linearly, in note()
/// (own_notes, twice per call) and again in apply()'s merge, so a
/// transaction that touches N distinct queues costs O(N^2); apply() runs in
/// the XACT_EVENT_COMMIT callback, after the commit record and before the
/// transaction's heavyweight locks are released, where nothing can cancel
/// it. Measured on PG 17: 32,000 claims (32 statements of 1,000) in one
/// transaction took 0.6 s over one queue and 7.3 s over 32,000 queues, the
/// COMMIT alone 2.1 s (8,000 queues: 0.58 s in all).
#[test]
fn noting_many_distinct_queues_in_one_transaction_stays_linear() {
    let db = fresh_db("review_metrics2_many_queues");
    let mut c = connect(&db);
    let n = 32_000;
    let mut timed = |queue_expr: &str| -> (f64, f64) {
        c.batch_execute(&format!(
            "SELECT pg_catalog.count(distlock.enqueue_task('job', '{{}}', p_queue => {queue_expr})) \
               FROM pg_catalog.generate_series(1, {n}) i"
        ))
        .expect("enqueue");
        let start = Instant::now();
        let mut t = c.transaction().expect("begin");
        let mut claimed = 0;
        for _ in 0..n / 1000 {
            let row = t
                .query_one("SELECT pg_catalog.count(*) FROM distlock.consume_tasks(1000, 'w', '1 hour')", &[])
                .expect("claim");
            claimed += row.get::<_, i64>(0);
        }
        assert_eq!(claimed, n);
        let before_commit = Instant::now();
        t.commit().expect("commit");
        (start.elapsed().as_secs_f64(), before_commit.elapsed().as_secs_f64())
    };
    let (one, _) = timed("'single'");
    let (many, commit) = timed("'many.' || i");
    c.batch_execute("SELECT distlock.reset_queue_counters()").expect("reset for later tests");
    assert!(
        many < 3.0 * one + 1.0 && commit < 0.5,
        "{n} claims over {n} distinct queues in one transaction took {many:.2} s (its COMMIT {commit:.2} s), \
         over one queue {one:.2} s: the notes cost O(queues^2)"
    );
}

/// Break: "a queue that finds no slot it may take is counted in its
/// database's overflow row ... its jobs are counted" (docs/metrics.md), yet
/// a partition keeps overflow figures for 8 databases only
/// (OVERFLOW_DATABASES) and, when all 8 are live, add_overflow() drops the
/// jobs silently. Two databases at their share fill every partition; ten
/// databases then overflow everywhere: the jobs of two of them per
/// partition are counted nowhere, and nothing shows the loss.
#[test]
fn every_claim_is_counted_in_its_queue_or_its_databases_overflow_row() {
    let mut lost = Vec::new();
    let dbs: Vec<String> = (0..10).map(|i| fresh_db(&format!("review_metrics2_db{i}"))).collect();
    for (i, db) in dbs.iter().enumerate() {
        let mut c = connect(db);
        // The first two fill their share of every partition; all overflow.
        let names = if i < 2 { 1500 } else { 200 };
        churn(&mut c, "q.", names, 1000);
        let counted: i64 = c
            .query_one("SELECT COALESCE(pg_catalog.sum(claimed), 0)::bigint FROM distlock.queue_counters()", &[])
            .expect("counters")
            .get(0);
        if counted != names {
            lost.push((db.clone(), names, counted));
        }
    }
    for db in &dbs {
        connect(db).batch_execute("SELECT distlock.reset_queue_counters()").expect("reset for later tests");
    }
    assert!(lost.is_empty(), "(database, claims, counted): claims counted nowhere: {lost:?}");
}
