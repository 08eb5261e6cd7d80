//! Review 41 of the claim functions' `queue` column (597a1be..6b5d1ae), whose
//! update to 0.4.0 dropped and created consume_task, consume_tasks and
//! settle_and_consume_tasks again. Each test failed on 6b5d1ae; the update
//! now renames 0.3.0's and gives the new ones 0.3.0's grants.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// A role given the consumer capability at 0.3.0 and later dropped the way
/// PostgreSQL drops a role with privileges (DROP OWNED, DROP ROLE), without
/// revoke_capability: its row stays in role_capabilities with the dropped
/// role's oid, which a regrole prints as a number. The update's re-grant of
/// the claim functions runs `GRANT ... TO 16709` and fails with a syntax
/// error (42601), so the database cannot be updated at all; before this
/// change the update did not touch consumer grants and went through.
#[test]
fn the_update_to_0_4_0_goes_through_with_a_dropped_consumer_role_left_in_role_capabilities() {
    update_goes_through_with_a_dropped_role("review_41_dropped_role", "consumer");
}

/// Consumers waiting in 0.3.0's consume_task, consume_tasks and
/// settle_and_consume_tasks (this library's 0.3.0 entry points) when the
/// update commits. The update drops the functions they are running; when
/// they claim a job enqueued after it, building the result row looks the
/// dropped function up (funcapi.c internal_get_result_type) and fails with
/// XX000 `cache lookup failed for function N`: the claim is rolled back and
/// the consumer gets an error instead of its job. (A session whose first
/// call waits across the update failed so with no job at all, in psql.)
/// Before this change the update kept the functions; this also makes
/// queue_wait::a_consumer_waiting_across_the_update_to_0_4_0_gets_a_job_enqueued_after_it
/// fail the same way.
#[test]
fn consumers_waiting_across_the_update_to_0_4_0_get_a_job_without_an_error() {
    let name = "review_41_wait_across_update";
    let mut c = fresh_db_at_version(name, "0.3.0");
    let calls = [
        "SELECT * FROM distlock.consume_task('w1', '1 minute', '8 seconds', ARRAY['q1'])",
        "SELECT * FROM distlock.consume_tasks(2, 'w2', '1 minute', '8 seconds', ARRAY['q2'])",
        "SELECT * FROM distlock.settle_and_consume_tasks(2, 'w3', p_wait => '8 seconds', p_queues => ARRAY['q3'])",
    ];
    let waiters: Vec<_> = calls
        .iter()
        .map(|call| {
            let mut waiter = connect_to(primary_port(), name, "review-41-waiter");
            // Plans prepared first (a first preparation during the wait
            // would hold the update back), as queue_wait.rs does.
            waiter.batch_execute(&call.replace("8 seconds", "0 seconds")).expect("warm");
            let call = call.to_string();
            thread::spawn(move || {
                let rows = waiter.query(&call, &[]).map_err(|e| format!("{call}: {}", described(e)))?;
                if rows.len() == 1 { Ok(()) } else { Err(format!("{call}: {} jobs", rows.len())) }
            })
        })
        .collect();
    eventually("the consumers wait", Duration::from_secs(10), || {
        count(
            &mut c,
            "SELECT 1 FROM pg_stat_activity WHERE application_name = 'review-41-waiter' AND wait_event_type = 'Extension'",
        ) == 3
    });
    let started = Instant::now();
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update");
    assert!(started.elapsed() < Duration::from_secs(4), "the update waited {:?} for the consumers", started.elapsed());
    // A job for each, before its next look (as queue_wait.rs's test does).
    c.batch_execute(
        "SELECT distlock.enqueue_task('j', '{}', p_queue => q) FROM unnest(ARRAY['q1', 'q2', 'q3']) q",
    )
    .expect("enqueue");
    let failed: Vec<String> = waiters.into_iter().filter_map(|w| w.join().expect("waiter").err()).collect();
    assert!(failed.is_empty(), "each waiting consumer gets its job, without an error:\n{}", failed.join("\n"));
}

/// The three claim functions' signatures.
const CLAIM_FUNCTIONS: [&str; 3] = [
    "distlock.consume_task(text, interval, interval, text[])",
    "distlock.consume_tasks(integer, text, interval, interval, text[])",
    "distlock.settle_and_consume_tasks(integer, text, bigint[], integer[], bigint[], integer[], text[], interval, interval, text[])",
];

/// A database whose owner's default privileges grant EXECUTE on new
/// functions to an application role (a common setup); after CREATE
/// EXTENSION the DBA took pg_distlock's functions back from it and gave it
/// a producer capability scoped to `b:`. The update's CREATE FUNCTION
/// applies the default privileges again and the script revokes only
/// PUBLIC's, so the role can claim every tenant's jobs after the update,
/// unscoped (it has no consumer capability), and reads another tenant's
/// payload and queue name; no WARNING names the grant. A fresh install's
/// functions carry what the DBA revoked, the update's do not.
#[test]
fn the_update_to_0_4_0_gives_the_claim_functions_to_no_role_without_a_consumer_capability() {
    let name = "review_41_default_privileges";
    let mut c = fresh_db_with_default_privileges(name);
    for function in CLAIM_FUNCTIONS {
        let sql = format!("SELECT has_function_privilege('review_41_app', '{function}', 'EXECUTE')");
        assert_eq!(scalar(&mut c, &sql).as_deref(), Some("f"), "before the update: {function}");
    }
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update");
    let granted: Vec<&str> = CLAIM_FUNCTIONS
        .into_iter()
        .filter(|function| {
            let sql = format!("SELECT has_function_privilege('review_41_app', '{function}', 'EXECUTE')");
            scalar(&mut c, &sql).as_deref() == Some("t")
        })
        .collect();
    let claimed = as_role(&mut c, "review_41_app", |c| {
        let rows = c.simple_query("SELECT queue FROM distlock.consume_task('x')").unwrap_or_default();
        rows.iter().filter(|m| matches!(m, postgres::SimpleQueryMessage::Row(_))).count()
    });
    assert!(
        granted.is_empty() && claimed == 0,
        "the producer scoped to b: may run {granted:?} after the update and claimed {claimed} job(s) of queue a:payments"
    );
}

/// `name` at 0.3.0, made by a role whose default privileges grant EXECUTE
/// to review_41_app, which then holds no pg_distlock function but a producer
/// capability scoped to `b:`; one job of tenant `a:` is queued.
fn fresh_db_with_default_privileges(name: &str) -> Client {
    let mut admin = connect_to(primary_port(), "postgres", "cluster-test");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).expect("drop");
    admin.batch_execute(&format!("CREATE DATABASE {name}")).expect("create database");
    let mut c = connect(name);
    c.batch_execute(
        "DO $$ BEGIN CREATE ROLE review_41_app; EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
         ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO review_41_app; \
         CREATE EXTENSION pg_distlock VERSION '0.3.0'; \
         REVOKE ALL ON ALL FUNCTIONS IN SCHEMA distlock FROM review_41_app; \
         SELECT distlock.grant_capability('review_41_app', 'producer', 'b:'); \
         SELECT distlock.enqueue_task('a:job', '{\"card\": \"4111\"}', p_queue => 'a:payments');",
    )
    .expect("a 0.3.0 database with default privileges");
    c
}
