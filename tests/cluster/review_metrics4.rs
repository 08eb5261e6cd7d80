//! Fourth review of the queue counters (branch metrics-rebased, after
//! e003a5a): breaks written as tests that fail on the branch.

use crate::support::*;

/// Enqueues one job in each of `names` queues `prefix || i` and claims them
/// all (committed), `batch` claims per statement, as the session's role.
fn churn(c: &mut Client, prefix: &str, names: i64, batch: i64) {
    c.batch_execute(&format!(
        "SELECT pg_catalog.count(distlock.enqueue_task('{prefix}job', '{{}}', p_queue => '{prefix}' || i)) \
           FROM pg_catalog.generate_series(1, {names}) i"
    ))
    .expect("enqueue churn");
    for _ in 0..(names + batch - 1) / batch {
        c.batch_execute(&format!("SELECT pg_catalog.count(*) FROM distlock.consume_tasks({batch}, 'w', '1 hour')"))
            .expect("claim churn");
    }
}

/// Break (tenants): the share that keeps one *database* from filling the
/// table is per database only. Inside one database, a role with producer
/// and consumer capability scoped to "rv4a." (it can neither see nor touch
/// "rv4b." queues) enqueues and claims one job under each of 2000 names of
/// its own prefix: that fills the database's share of every partition
/// (32 live entries of 64 at the default capacity), and every new queue
/// of tenant "rv4b." then finds no slot it may take and is counted only in
/// the database's overflow row, which a scoped monitor is never shown. So
/// tenant b's monitor (and its exporter) sees nothing of its queue for as
/// long as tenant a keeps its names live (one claim each per hour): one
/// tenant blinds another's metrics, and a scoped monitor can even tell
/// from the missing row that other tenants hold the table.
#[test]
fn a_scoped_tenant_cannot_leave_another_tenants_new_queue_uncounted() {
    let db = fresh_db("review_metrics4_tenant_share");
    // An empty table (earlier tests leave slots used).
    let mut c = crash_restart_primary(&db);
    ensure_role(&mut c, "review_metrics4_a");
    ensure_role(&mut c, "review_metrics4_b");
    for capability in ["producer", "consumer"] {
        c.batch_execute(&format!("SELECT distlock.grant_capability('review_metrics4_a', '{capability}', 'rv4a.')"))
            .expect("scoped capability a");
    }
    for capability in ["producer", "consumer", "monitor"] {
        c.batch_execute(&format!("SELECT distlock.grant_capability('review_metrics4_b', '{capability}', 'rv4b.')"))
            .expect("scoped capability b");
    }
    as_role(&mut c, "review_metrics4_a", |c| churn(c, "rv4a.", 2000, 1000));
    let seen_by_b = as_role(&mut c, "review_metrics4_b", |c| {
        churn(c, "rv4b.", 4, 4);
        count(c, "SELECT 1 FROM distlock.queue_counters() WHERE queue LIKE 'rv4b.%' AND claimed = 1")
    });
    assert_eq!(
        count(&mut c, "SELECT 1 FROM distlock.task_queue WHERE queue LIKE 'rv4b.%' AND status = 'processing'"),
        4,
        "tenant b claimed its 4 jobs (committed)"
    );
    let overflow_claims: i64 = c
        .query_one("SELECT COALESCE(pg_catalog.sum(claimed), 0)::bigint FROM distlock.queue_counters() WHERE queue IS NULL", &[])
        .expect("overflow")
        .get(0);
    c.batch_execute("SELECT distlock.reset_queue_counters()").expect("reset for later tests");
    assert_eq!(
        seen_by_b, 4,
        "tenant rv4b.'s monitor sees {seen_by_b} of its 4 new queues: tenant rv4a.'s 2000 names took the database's \
         whole share, and rv4b.'s claims went to the overflow row ({overflow_claims} claims there), which no scoped \
         monitor is shown"
    );
}

/// Sets `distlock.queue_counters_capacity` with ALTER SYSTEM and restarts
/// the primary; back to the default (restarted again) when dropped, also
/// when the test fails.
struct Capacity(String);

impl Capacity {
    fn set(db: &str, capacity: i32) -> (Capacity, Client) {
        connect(db)
            .batch_execute(&format!("ALTER SYSTEM SET distlock.queue_counters_capacity = {capacity}"))
            .expect("alter system");
        let c = crash_restart_primary(db);
        (Capacity(db.to_string()), c)
    }
}

impl Drop for Capacity {
    fn drop(&mut self) {
        connect(&self.0).batch_execute("ALTER SYSTEM RESET distlock.queue_counters_capacity").expect("alter system");
        drop(crash_restart_primary(&self.0));
    }
}

/// Mean seconds of the COMMIT of `rounds` transactions that each claim one
/// job of each of 64 queues (their counters fall in most of the 16
/// partitions), synchronous_commit off so that the WAL flush is not timed.
fn mean_commit_seconds(c: &mut Client, rounds: i64) -> f64 {
    c.batch_execute(&format!(
        "SELECT pg_catalog.count(distlock.enqueue_task('job', '{{}}', p_queue => 'cost.' || q)) \
           FROM pg_catalog.generate_series(1, 64) q, pg_catalog.generate_series(0, {rounds}) r; \
         SET synchronous_commit = off"
    ))
    .expect("enqueue");
    // Every queue has its entry before the timing starts.
    let mut total = 0.0;
    for round in 0..=rounds {
        c.batch_execute("BEGIN").expect("begin");
        let claimed = count(c, "SELECT 1 FROM distlock.consume_tasks(64, 'w', '1 hour')");
        assert!(claimed > 0, "round {round} claimed jobs");
        let start = std::time::Instant::now();
        c.batch_execute("COMMIT").expect("commit");
        if round > 0 {
            total += start.elapsed().as_secs_f64();
        }
    }
    total / rounds as f64
}

/// Break (cost at commit): add_to_partition() counts the entries its
/// database holds in the partition (`held`) by scanning the whole
/// partition at every commit, before it knows whether any queue needs a
/// new slot: capacity/16 entries (360 bytes each) walked under the
/// partition's exclusive LWLock, in the XACT_EVENT_COMMIT callback, for
/// every partition the transaction's queues fall in. At the largest
/// capacity the GUC accepts (1,000,000: 62,500 entries a partition) a
/// commit that counts queues in all 16 partitions walks the whole table,
/// and every other committing consumer of those partitions waits for it;
/// measured here: pgbench of one claim+complete per transaction, 2
/// clients, fell from about 2,300-5,000 tps at the default to about
/// 1,200. Nothing in docs/operations.md says the capacity costs every
/// commit; a queue that already has its entry needs no count at all.
#[test]
fn a_commit_does_not_walk_the_whole_counter_table_at_a_large_capacity() {
    let db = fresh_db("review_metrics4_commit_cost");
    let mut c = crash_restart_primary(&db);
    let at_default = mean_commit_seconds(&mut c, 40);
    drop(c);
    let (_capacity, mut c) = Capacity::set(&db, 1_000_000);
    assert_eq!(scalar(&mut c, "SHOW distlock.queue_counters_capacity").as_deref(), Some("1000000"));
    let at_max = mean_commit_seconds(&mut c, 40);
    assert!(
        at_max < 3.0 * at_default + 0.002,
        "a COMMIT counting 64 queues took {:.2} ms at capacity 1,000,000 and {:.2} ms at the default 1024: \
         every commit walks its partitions' entries (held count) under their exclusive locks",
        at_max * 1e3,
        at_default * 1e3
    );
}
