//! Consumers learn each claimed job's queue (issue 47, item 6): the last
//! column of consume_task, consume_tasks and settle_and_consume_tasks from
//! 0.4.0 on, while a database still at 0.3.0's SQL gets 0.3.0's columns from
//! this library until ALTER EXTENSION pg_distlock UPDATE.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::*;

const COLUMNS_0_3_0: &str = "task_id,task_name,payload,attempts,max_attempts,lease_expires_at,priority,worker_id";

/// The result columns of `call`, as prepared (nothing runs).
fn columns_of(c: &mut Client, call: &str) -> String {
    let statement = c.prepare(&format!("SELECT * FROM {call}")).unwrap_or_else(|e| panic!("{call}: {e}"));
    statement.columns().iter().map(|column| column.name()).collect::<Vec<_>>().join(",")
}

const CONSUME_TASK: &str = "distlock.consume_task('c')";
const CONSUME_TASKS: &str = "distlock.consume_tasks(2, 'c')";
const SETTLE_AND_CONSUME: &str = "distlock.settle_and_consume_tasks(2, 'c')";

/// (job id, queue) of each row `sql` returns (its first two columns).
fn jobs_and_queues(c: &mut Client, sql: &str) -> Vec<(i64, Option<String>)> {
    c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}")).iter().map(|row| (row.get(0), row.get(1))).collect()
}

/// Two queues, jobs in each; consumers of both take them through each of
/// the three functions (and one waiting in the server, woken by another
/// session's enqueue), and every job says the queue it was enqueued in.
#[test]
fn consumers_learn_each_jobs_queue_from_all_three_claim_functions() {
    for (mode, port) in storage_modes() {
        let db = fresh_db_on(port, &format!("job_queue_column_{mode}"));
        let mut c = connect_to(port, &db, "job-queue");
        let mut producer = connect_to(port, &db, "job-queue-producer");
        for (function, before_last) in [(CONSUME_TASK, "worker_id"), (CONSUME_TASKS, "worker_id"), (SETTLE_AND_CONSUME, "outcome")] {
            let columns = columns_of(&mut c, function);
            assert!(columns.ends_with(&format!(",{before_last},queue,group_key")), "{mode}: {function}: {columns}");
        }
        let mut enqueued: BTreeMap<i64, String> = BTreeMap::new();
        let mut enqueue = |c: &mut Client, queue: &str, n: usize| {
            for _ in 0..n {
                let id: i64 = c
                    .query_one("SELECT distlock.enqueue_task('job', '{}', p_queue => $1)", &[&queue])
                    .expect("enqueue")
                    .get(0);
                enqueued.insert(id, queue.to_string());
            }
        };
        enqueue(&mut producer, "email", 3);
        enqueue(&mut producer, "thumbs", 3);
        let both = "p_queues => ARRAY['email', 'thumbs']";
        let mut claimed: Vec<(i64, Option<String>)> = Vec::new();
        claimed.extend(jobs_and_queues(&mut c, &format!("SELECT task_id, queue FROM distlock.consume_task('c', {both})")));
        claimed.extend(jobs_and_queues(&mut c, "SELECT task_id, queue FROM distlock.consume_task('c')"));
        claimed.extend(jobs_and_queues(&mut c, &format!("SELECT task_id, queue FROM distlock.consume_tasks(2, 'c', {both})")));
        claimed.extend(jobs_and_queues(
            &mut c,
            &format!("SELECT task_id, queue FROM distlock.settle_and_consume_tasks(5, 'c', {both}) WHERE outcome = 'claimed'"),
        ));
        assert_eq!(claimed.len(), 6, "{mode}: every job claimed once: {claimed:?}");
        // A consumer waiting in the server for a job of either queue.
        let waiting = std::thread::spawn({
            let db = db.clone();
            move || {
                let mut consumer = connect_to(port, &db, "job-queue-waiting");
                jobs_and_queues(
                    &mut consumer,
                    "SELECT task_id, queue FROM distlock.consume_task('c', p_wait => '20 seconds', \
                                                                       p_queues => ARRAY['email', 'thumbs'])",
                )
            }
        });
        eventually("the consumer to wait", Duration::from_secs(10), || {
            count(&mut producer, "SELECT 1 FROM pg_stat_activity WHERE application_name = 'job-queue-waiting' AND state = 'active'") == 1
        });
        std::thread::sleep(Duration::from_millis(200));
        enqueue(&mut producer, "thumbs", 1);
        claimed.extend(waiting.join().expect("the waiting consumer"));
        let said: BTreeMap<i64, String> =
            claimed.into_iter().map(|(id, queue)| (id, queue.unwrap_or_else(|| format!("no queue for job {id}")))).collect();
        assert_eq!(said, enqueued, "{mode}: each job's queue as claimed, against where it was enqueued");
    }
}

/// A database created at 0.3.0 (its SQL binds 0.3.0's C symbols) gets 0.3.0's
/// columns from this library, and its consumers their jobs; after the update
/// the queue comes last, a consumer capability granted at 0.3.0 still calls
/// all three, a grant made by hand comes over, and a view over one of them
/// stops the update until it is dropped.
#[test]
fn a_0_3_0_database_keeps_0_3_0s_columns_until_its_update() {
    let name = "job_queue_column_0_3_0";
    let mut c = fresh_db_at_version(name, "0.3.0");
    c.batch_execute(
        "DO $$ BEGIN CREATE ROLE distlock_jq_consumer; EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
         DO $$ BEGIN CREATE ROLE distlock_jq_by_hand; EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
         SELECT distlock.grant_capability('distlock_jq_consumer', 'consumer', 'q.'); \
         GRANT USAGE ON SCHEMA distlock TO distlock_jq_by_hand; \
         GRANT EXECUTE ON FUNCTION distlock.consume_task(text, interval, interval, text[]) TO distlock_jq_by_hand;",
    )
    .expect("roles");
    for function in [CONSUME_TASK, CONSUME_TASKS] {
        assert_eq!(columns_of(&mut c, function), COLUMNS_0_3_0, "{function} at 0.3.0");
    }
    assert_eq!(columns_of(&mut c, SETTLE_AND_CONSUME), format!("{COLUMNS_0_3_0},outcome"));
    let job = |c: &mut Client, queue: &str| -> i64 {
        c.query_one("SELECT distlock.enqueue_task('q.job', '{\"n\": 1}', p_queue => $1)", &[&queue]).expect("enqueue").get(0)
    };
    // Each row whole, as text: values in the right columns, none left over.
    let rows = |c: &mut Client, sql: &str| -> Vec<String> {
        let sql = format!("SELECT row(r.*)::text FROM ({sql}) r");
        c.query(&sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}")).iter().map(|row| row.get(0)).collect()
    };
    let (a, b, d) = (job(&mut c, "q.a"), job(&mut c, "q.b"), job(&mut c, "q.a"));
    let strip = "task_id, task_name, payload, attempts, max_attempts, priority, worker_id";
    assert_eq!(
        rows(&mut c, &format!("SELECT {strip} FROM distlock.consume_task('w1', p_queues => ARRAY['q.a'])")),
        [format!("({a},q.job,\"{{\"\"n\"\": 1}}\",1,5,0,w1)")]
    );
    let whole = rows(&mut c, "SELECT * FROM distlock.consume_tasks(5, 'w2', p_queues => ARRAY['q.b'])");
    assert!(whole.len() == 1 && whole[0].starts_with(&format!("({b},q.job,")) && whole[0].ends_with(",0,w2)"), "{whole:?}");
    let settled =
        rows(&mut c, &format!("SELECT * FROM distlock.settle_and_consume_tasks(5, 'w1', ARRAY[{a}]::bigint[], p_queues => ARRAY['q.a'])"));
    assert!(settled.len() == 1 && settled[0].starts_with(&format!("({d},q.job,")) && settled[0].ends_with(",w1,claimed)"), "{settled:?}");

    // A view over consume_task stops the update (nothing changes), naming
    // itself, until dropped: renamed along, it would call a function that no
    // dump restores.
    c.batch_execute("CREATE VIEW public.next_job AS SELECT * FROM distlock.consume_task('v', p_queues => ARRAY['q.none'])")
        .expect("view");
    let refused = c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect_err("the update goes through under a view");
    let refused = refused.as_db_error().expect("a server error");
    assert!(
        refused.code().code() == "2BP01" && refused.message().contains("view public.next_job"),
        "{}: {}",
        refused.code().code(),
        refused.message()
    );
    assert_eq!(scalar(&mut c, "SELECT extversion FROM pg_extension WHERE extname = 'pg_distlock'").as_deref(), Some("0.3.0"));
    c.batch_execute("DROP VIEW public.next_job").expect("drop the view");
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update");
    let mut c = connect(name);
    for function in [CONSUME_TASK, CONSUME_TASKS] {
        assert_eq!(columns_of(&mut c, function), format!("{COLUMNS_0_3_0},queue,group_key"), "{function} after the update");
    }
    assert_eq!(columns_of(&mut c, SETTLE_AND_CONSUME), format!("{COLUMNS_0_3_0},outcome,queue,group_key"));
    assert_eq!(
        scalar(&mut c, "SELECT has_function_privilege('distlock_jq_by_hand', 'distlock.consume_task(text, interval, interval, text[])', 'EXECUTE')").as_deref(),
        Some("t"),
        "the grant made by hand came over to the new function"
    );
    assert_eq!(
        scalar(&mut c, "SELECT has_function_privilege('distlock_jq_by_hand', 'distlock.consume_task_0_3_0(text, interval, interval, text[])', 'EXECUTE')").as_deref(),
        Some("f"),
        "the renamed function is the owner's alone"
    );
    let e = job(&mut c, "q.a");
    let f = job(&mut c, "q.b");
    let g = job(&mut c, "q.b");
    let after = as_role(&mut c, "distlock_jq_consumer", |c| {
        let mut got = jobs_and_queues(c, "SELECT task_id, queue FROM distlock.consume_task('w3', p_queues => ARRAY['q.a'])");
        got.extend(jobs_and_queues(c, "SELECT task_id, queue FROM distlock.consume_tasks(1, 'w3', p_queues => ARRAY['q.b'])"));
        got.extend(jobs_and_queues(
            c,
            "SELECT task_id, queue FROM distlock.settle_and_consume_tasks(5, 'w3', p_queues => ARRAY['q.a', 'q.b'])",
        ));
        got
    });
    assert_eq!(
        after,
        [(e, Some("q.a".to_string())), (f, Some("q.b".to_string())), (g, Some("q.b".to_string()))],
        "the consumer granted at 0.3.0 calls all three"
    );
}
