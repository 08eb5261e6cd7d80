//! Review of the queue counters (branch metrics-counters): breaks written as
//! tests that fail on the branch as reviewed.

use crate::support::*;

/// (claimed, completed, dead, expired, wait_count) of `queue`, zeros when
/// it has no entry.
fn counts(c: &mut Client, queue: &str) -> [i64; 5] {
    let rows = c
        .query(
            "SELECT claimed, completed, dead, expired, wait_count FROM distlock.queue_counters() WHERE queue = $1",
            &[&queue],
        )
        .expect("queue_counters");
    match rows.first() {
        Some(r) => [r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)],
        None => [0; 5],
    }
}

/// Break: the shared table is one for the whole server (all databases)
/// and a new queue replaces the least recently counted entry it probes,
/// whatever its database. So a database that churns queue names (a tenant
/// with a database of its own, 4000 queue names, each job claimed once)
/// zeroes another database's counters: they fall, and Prometheus reads a
/// reset. The rate-limit table has distlock.rate_limit_database_share for
/// exactly this; the counters have no share.
#[test]
fn another_databases_queue_names_do_not_evict_this_databases_counters() {
    let db = fresh_db("review_metrics_victim");
    let noisy = fresh_db("review_metrics_noisy");
    let mut v = connect(&db);
    let mut n = connect(&noisy);
    v.batch_execute("SELECT distlock.enqueue_task('job', '{}', p_queue => 'orders')").expect("enqueue");
    assert_eq!(count(&mut v, "SELECT 1 FROM distlock.consume_task('w', p_queues => ARRAY['orders'])"), 1);
    assert_eq!(counts(&mut v, "orders")[0], 1, "one claim counted");

    // The other database: 4000 queue names, a job each, claimed in 4 commits.
    n.batch_execute(
        "SELECT pg_catalog.count(distlock.enqueue_task('job', '{}', p_queue => 'churn.' || i)) \
           FROM pg_catalog.generate_series(1, 4000) i",
    )
    .expect("enqueue churn");
    for _ in 0..4 {
        n.batch_execute("SELECT pg_catalog.count(*) FROM distlock.consume_tasks(1000, 'w', '1 hour')")
            .expect("claim churn");
    }
    assert_eq!(count(&mut n, "SELECT 1 FROM distlock.task_queue WHERE status = 'processing'"), 4000);
    // The names that found no slot (the table is full of live counters, or
    // the database holds its share) are counted in its overflow row: every
    // claim shows somewhere, and the loss is visible.
    let (claimed, overflow): (i64, i64) = {
        let row = n
            .query_one(
                "SELECT pg_catalog.sum(claimed)::bigint, pg_catalog.sum(claimed) FILTER (WHERE queue IS NULL)::bigint \
                   FROM distlock.queue_counters()",
                &[],
            )
            .expect("noisy database's counters");
        (row.get(0), row.get::<_, Option<i64>>(1).unwrap_or(0))
    };
    assert_eq!(claimed, 4000, "every claim counted, in its queue's entry or the overflow row");
    assert!(overflow > 0, "4000 queue names do not all fit: the overflow row counts the rest");

    assert_eq!(
        counts(&mut v, "orders")[0],
        1,
        "another database's queue names evicted this database's counters (they fell to zero)"
    );
    // Its slots, live for an hour, would leave later tests none: an admin's
    // reset lets other queues take them at once.
    n.batch_execute("SELECT distlock.reset_queue_counters()").expect("reset frees the churn's slots");
}

/// The review's break 3: the sweep puts a job whose lease ran out back
/// without touching run_after (it keeps its place in the index), so its next
/// claim is counted as having waited the time its lost consumer held it. A
/// fix that recorded the put-back in completed_at showed pending jobs as
/// finished (the console reads completed_at) and added a subquery to both
/// claim statements, so the decision is the documented meaning: the wait is
/// from when the job was due (created_at or run_after), and a job put back
/// includes its lost consumer's hold (docs/metrics.md). This test holds it.
#[test]
fn a_job_put_back_by_the_sweep_waits_from_when_it_was_due_its_lost_consumers_hold_included() {
    let db = fresh_db("review_metrics_put_back");
    let mut c = connect(&db);
    c.batch_execute("SELECT distlock.enqueue_task('job', '{}', p_queue => 'putback')").expect("enqueue");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.consume_task('w', '2 seconds', NULL, ARRAY['putback'])"), 1);
    // Its consumer dies; the lease runs out; the sweep puts it back.
    c.batch_execute("SELECT pg_sleep(2.5)").expect("lease runs out");
    c.batch_execute("SELECT distlock.check_and_recover_timeout_tasks()").expect("sweep");
    assert_eq!(counts(&mut c, "putback")[3], 1, "put back after its lease ran out");
    // Claimed again at once.
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.consume_task('w2', '1 hour', NULL, ARRAY['putback'])"), 1);
    let (within_half_second, wait_sum): (i64, f64) = {
        let row = c
            .query_one(
                "SELECT wait_buckets[pg_catalog.array_position(wait_le, 0.5::float8)], wait_sum \
                   FROM distlock.queue_counters() WHERE queue = 'putback'",
                &[],
            )
            .expect("histogram");
        (row.get(0), row.get(1))
    };
    assert_eq!(within_half_second, 1, "the first claim within 0.5 s, the second past it (wait_sum {wait_sum} s)");
    assert!(wait_sum >= 2.0, "the second claim's wait includes the 2 s lease its lost consumer held: {wait_sum} s");
}

/// Break: the same eviction inside one database, by a tenant. A role with
/// producer and consumer scope "rvt_a." only (it can neither see nor touch
/// queue "rvt_b.orders") enqueues and claims jobs under 4000 names of its
/// own prefix, and tenant b's counters are gone: a scoped role can zero
/// another tenant's counters (and its monitor, polling, can tell that the
/// table turned over). Entries are replaced by recency alone, whoever asks.
#[test]
fn a_scoped_tenants_queue_names_do_not_evict_another_tenants_counters() {
    let db = fresh_db("review_metrics_tenants");
    let mut c = connect(&db);
    c.batch_execute("SELECT distlock.enqueue_task('job', '{}', p_queue => 'rvt_b.orders')").expect("enqueue b");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.consume_task('w', p_queues => ARRAY['rvt_b.orders'])"), 1);
    assert_eq!(counts(&mut c, "rvt_b.orders")[0], 1);

    ensure_role(&mut c, "review_metrics_tenant_a");
    for capability in ["producer", "consumer"] {
        c.batch_execute(&format!(
            "SELECT distlock.grant_capability('review_metrics_tenant_a', '{capability}', 'rvt_a.')"
        ))
        .expect("scoped capability");
    }
    as_role(&mut c, "review_metrics_tenant_a", |c| {
        c.batch_execute(
            "SELECT pg_catalog.count(distlock.enqueue_task('rvt_a.job', '{}', p_queue => 'rvt_a.' || i)) \
               FROM pg_catalog.generate_series(1, 4000) i",
        )
        .expect("tenant a enqueues under its prefix");
        for _ in 0..4 {
            c.batch_execute("SELECT pg_catalog.count(*) FROM distlock.consume_tasks(1000, 'a', '1 hour')")
                .expect("tenant a claims its own jobs");
        }
    });
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_queue WHERE queue LIKE 'rvt_a.%' AND status = 'processing'"), 4000);
    assert_eq!(
        counts(&mut c, "rvt_b.orders")[0],
        1,
        "a tenant scoped to rvt_a. evicted tenant rvt_b.'s queue counters (they fell to zero)"
    );
    c.batch_execute("SELECT distlock.reset_queue_counters()").expect("reset frees the churn's slots");
}
