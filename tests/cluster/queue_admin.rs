//! An admin takes processing jobs back from their consumers (issue 44, item
//! 5): the job is runnable again at once (a waiting consumer gets it), the
//! attempt its consumer used stays counted, and that consumer's settles are
//! refused; only the admin capability may do it.

use std::time::{Duration, Instant};

use crate::support::*;

#[test]
fn an_admin_returns_a_held_job_and_its_consumers_settles_are_refused() {
    let db = fresh_db("queue_admin_requeue");
    let mut admin = connect(&db);
    let mut holder = connect_to(primary_port(), &db, "holder");
    let job: i64 = admin
        .query_one("SELECT distlock.enqueue_task('report', '{}', now(), 0, 1, 'mail')", &[])
        .expect("enqueue")
        .get(0);
    let held: i64 = holder
        .query_one("SELECT task_id FROM distlock.consume_task('holder', '1 day', p_queues => ARRAY['mail'])", &[])
        .expect("claim")
        .get(0);
    assert_eq!(held, job);

    // A consumer waits for the queue; the requeue's commit wakes it.
    let waiter_db = db.clone();
    let waiter = std::thread::spawn(move || {
        let mut w = connect_to(primary_port(), &waiter_db, "waiter");
        let started = Instant::now();
        let row = w
            .query_opt(
                "SELECT task_id, attempts FROM distlock.consume_task('waiter', '1 minute', '20 seconds', ARRAY['mail'])",
                &[],
            )
            .expect("wait");
        (row.map(|r| (r.get::<_, i64>(0), r.get::<_, i32>(1))), started.elapsed())
    });
    eventually("the waiter waits", Duration::from_secs(10), || {
        count(&mut admin, "SELECT 1 FROM pg_stat_activity WHERE application_name = 'waiter' AND wait_event_type = 'Extension'") == 1
    });
    let returned: i64 = admin
        .query_one("SELECT distlock.requeue_jobs(NULL, ARRAY[$1]::bigint[])", &[&job])
        .expect("requeue")
        .get(0);
    assert_eq!(returned, 1);
    let (taken, waited) = waiter.join().expect("waiter");
    assert_eq!(taken, Some((job, 2)), "the waiter takes the job back, its second attempt (one more allowed)");
    assert!(waited < Duration::from_secs(10), "woken by the requeue, not by its timeout: {waited:?}");
    for settle in [
        "SELECT distlock.complete_task($1, 'holder')",
        "SELECT distlock.fail_task($1, 'late', 'holder')",
        "SELECT distlock.extend_task_lease($1, '1 minute', 'holder')",
    ] {
        let done: bool = holder.query_one(settle, &[&job]).expect("settle").get(0);
        assert!(!done, "{settle}: the old holder's settle went through");
    }
    assert_eq!(scalar(&mut admin, &format!("SELECT worker_id FROM distlock.task_queue WHERE id = {job}")), Some("waiter".into()));
    let last_error = scalar(&mut admin, &format!("SELECT last_error FROM distlock.task_queue WHERE id = {job}"));
    assert!(last_error.is_some_and(|e| e.contains("returned to the queue by an admin (worker holder)")));
}

#[test]
fn only_the_admin_capability_may_requeue() {
    let db = fresh_db("queue_admin_requeue_roles");
    let mut c = connect(&db);
    c.batch_execute(
        "DROP ROLE IF EXISTS queue_admin_consumer; CREATE ROLE queue_admin_consumer; \
         DROP ROLE IF EXISTS queue_admin_admin; CREATE ROLE queue_admin_admin; \
         SELECT distlock.grant_capability('queue_admin_consumer', 'consumer'); \
         SELECT distlock.grant_capability('queue_admin_admin', 'admin'); \
         SELECT distlock.enqueue_task('report'); \
         SELECT * FROM distlock.consume_task('w', '1 hour');",
    )
    .expect("roles and a held job");
    refused(&mut c, "queue_admin_consumer", "SELECT distlock.requeue_jobs()");
    let returned = as_role(&mut c, "queue_admin_admin", |c| scalar(c, "SELECT distlock.requeue_jobs()"));
    assert_eq!(returned, Some("1".into()));
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_queue WHERE status = 'processing'"), 0);
}

/// Consumers that share a worker id (the default one is application_name)
/// are told apart only by the attempt: after a requeue, the old consumer's
/// settle with its attempt is refused and the new consumer's goes through.
/// (Without p_attempt they cannot be told apart: docs/queue.md.)
#[test]
fn after_requeue_a_settle_with_the_old_attempt_is_refused() {
    let db = fresh_db("queue_admin_requeue_attempt");
    let mut admin = connect(&db);
    let mut old = connect_to(primary_port(), &db, "app");
    let mut new = connect_to(primary_port(), &db, "app");
    admin.batch_execute("SELECT distlock.enqueue_task('j', p_queue => 'q')").expect("enqueue");
    let row = old.query_one("SELECT task_id, attempts FROM distlock.consume_task(p_queues => ARRAY['q'])", &[]).expect("claim");
    let (job, first): (i64, i32) = (row.get(0), row.get(1));
    let requeued: i64 = admin.query_one("SELECT distlock.requeue_jobs('q', NULL)", &[]).expect("requeue").get(0);
    assert_eq!(requeued, 1);
    let row = new.query_one("SELECT task_id, attempts FROM distlock.consume_task(p_queues => ARRAY['q'])", &[]).expect("claim");
    let (again, second): (i64, i32) = (row.get(0), row.get(1));
    assert_eq!((again, second), (job, first + 1));
    for settle in [
        "SELECT distlock.complete_task($1, NULL, $2)",
        "SELECT distlock.extend_task_lease($1, '1 minute', NULL, $2)",
        "SELECT distlock.fail_task($1, 'late', NULL, $2)",
    ] {
        let done: bool = old.query_one(settle, &[&job, &first]).expect("settle").get(0);
        assert!(!done, "{settle}: the old attempt settled the new one");
    }
    let done: bool = new.query_one("SELECT distlock.complete_task($1, NULL, $2)", &[&job, &second]).expect("complete").get(0);
    assert!(done, "the live attempt completes");
}

/// An admin empties one queue: its waiting and dead jobs go, its processing
/// ones only when asked (their consumers' completions then return false),
/// other queues keep theirs, and the next job's id is new. A consumer may
/// not purge.
#[test]
fn an_admin_purges_one_queue_and_ids_stay_unique() {
    let db = fresh_db("queue_admin_purge");
    let mut c = connect(&db);
    c.batch_execute(
        "DROP ROLE IF EXISTS queue_purge_consumer; CREATE ROLE queue_purge_consumer; \
         DROP ROLE IF EXISTS queue_purge_admin; CREATE ROLE queue_purge_admin; \
         SELECT distlock.grant_capability('queue_purge_consumer', 'consumer'); \
         SELECT distlock.grant_capability('queue_purge_admin', 'admin'); \
         SELECT distlock.enqueue_task('job', p_queue => 'q') FROM generate_series(1, 4); \
         SELECT distlock.enqueue_task('job', p_queue => 'other');",
    )
    .expect("jobs");
    let held: i64 = c
        .query_one("SELECT task_id FROM distlock.consume_task('holder', '1 hour', p_queues => ARRAY['q'])", &[])
        .expect("claim")
        .get(0);
    // One job dead: claimed with its last attempt and failed.
    c.batch_execute(
        "UPDATE distlock.task_queue SET max_attempts = 1 WHERE queue = 'q' AND status = 'pending'; \
         SELECT distlock.fail_task(task_id, 'no', 'dying') FROM distlock.consume_task('dying', p_queues => ARRAY['q'])",
    )
    .expect("a dead job");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.jobs WHERE queue = 'q' AND status = 'dead'"), 1);
    refused(&mut c, "queue_purge_consumer", "SELECT distlock.purge_queue('q')");
    let purged = as_role(&mut c, "queue_purge_admin", |c| scalar(c, "SELECT distlock.purge_queue('q')"));
    assert_eq!(purged, Some("3".into()), "two pending jobs and the dead one");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_queue WHERE queue = 'q'"), 1, "the held job stays");
    assert_eq!(scalar(&mut c, "SELECT distlock.purge_queue('q', p_processing => true)"), Some("1".into()));
    assert_eq!(
        sqlstate(c.simple_query(&format!("SELECT distlock.complete_task({held}, 'holder')"))),
        "P0002",
        "the purged job's completion finds no job"
    );
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_queue WHERE queue = 'other'"), 1, "the other queue keeps its job");
    let before: i64 = c.query_one("SELECT max(id) FROM distlock.jobs", &[]).expect("max").get(0);
    let next: i64 = c.query_one("SELECT distlock.enqueue_task('job', p_queue => 'q')", &[]).expect("enqueue").get(0);
    assert!(next > before, "id {next} after a purge is not above {before}");
    assert_eq!(sqlstate(c.simple_query("SELECT distlock.purge_queue(NULL)")), "22004");
}

/// TRUNCATE ... RESTART IDENTITY of the queue starts ids over where
/// completed_jobs already has them; the ids go on above those instead, so
/// the next job completes rather than failing each completion with 23505.
#[test]
fn after_truncate_restart_identity_new_jobs_complete() {
    let db = fresh_db("queue_admin_truncate");
    let mut c = connect(&db);
    c.batch_execute(
        "SELECT distlock.enqueue_task('job') FROM generate_series(1, 3); \
         SELECT distlock.complete_task(task_id, 'w') FROM distlock.consume_tasks(3, 'w'); \
         TRUNCATE distlock.task_queue RESTART IDENTITY;",
    )
    .expect("three completed jobs, then the queue truncated");
    let next: i64 = c.query_one("SELECT distlock.enqueue_task('job')", &[]).expect("enqueue").get(0);
    assert!(next > 3, "the id {next} is one completed_jobs holds");
    assert_eq!(
        scalar(&mut c, "SELECT distlock.complete_task(task_id, 'w') FROM distlock.consume_task('w')"),
        Some("t".into())
    );
    // A plain TRUNCATE never moves ids back.
    c.batch_execute("TRUNCATE distlock.task_queue").expect("truncate");
    let after: i64 = c.query_one("SELECT distlock.enqueue_task('job')", &[]).expect("enqueue").get(0);
    assert!(after > next, "{after} after {next}");
}

/// Nor does TRUNCATE ... RESTART IDENTITY hand out again the id of a job a
/// consumer still held: that consumer's stale completion would settle the
/// new job of the same id.
#[test]
fn truncate_restart_identity_never_reuses_an_id_that_was_in_flight() {
    let db = fresh_db("queue_admin_truncate_in_flight");
    let mut c = connect(&db);
    c.batch_execute(
        "SELECT distlock.enqueue_task('job') FROM generate_series(1, 2); \
         SELECT distlock.complete_task(task_id, 'app') FROM distlock.consume_task('app');",
    )
    .expect("job 1 completed");
    let held: i64 = c.query_one("SELECT task_id FROM distlock.consume_task('app')", &[]).expect("job 2 held").get(0);
    c.batch_execute("TRUNCATE distlock.task_queue RESTART IDENTITY").expect("truncate");
    let next: i64 = c.query_one("SELECT distlock.enqueue_task('job')", &[]).expect("enqueue").get(0);
    assert!(next > held, "id {next} again after the truncate (job {held} was held)");
}

/// The id floor holds whatever else the TRUNCATE does: with another table
/// whose trigger runs in between, and with session_replication_role =
/// replica (as a logical-replication subscriber applies a TRUNCATE).
#[test]
fn truncate_restart_identity_keeps_ids_unique_beside_other_tables_and_in_replica_role() {
    let db = fresh_db("queue_admin_truncate_others");
    let mut c = connect(&db);
    c.batch_execute(
        "CREATE TABLE other (i int); \
         CREATE FUNCTION other_trigger() RETURNS trigger LANGUAGE plpgsql AS \
           $$ BEGIN PERFORM set_config('pg_distlock.job_ids_in_use', '0', true); RETURN NULL; END $$; \
         CREATE TRIGGER other_trigger BEFORE TRUNCATE ON other FOR EACH STATEMENT EXECUTE FUNCTION other_trigger(); \
         SELECT distlock.enqueue_task('job') FROM generate_series(1, 3);",
    )
    .expect("three jobs");
    let held: i64 = c.query_one("SELECT task_id FROM distlock.consume_task('app')", &[]).expect("held").get(0);
    c.batch_execute("TRUNCATE distlock.task_queue, other RESTART IDENTITY").expect("truncate with another table");
    let next: i64 = c.query_one("SELECT distlock.enqueue_task('job')", &[]).expect("enqueue").get(0);
    assert!(next > 3, "id {next} again after truncating beside another table (job {held} was held)");
    c.batch_execute(
        "BEGIN; SET LOCAL session_replication_role = replica; TRUNCATE distlock.task_queue RESTART IDENTITY; COMMIT",
    )
    .expect("truncate as a replica");
    let after: i64 = c.query_one("SELECT distlock.enqueue_task('job')", &[]).expect("enqueue").get(0);
    assert!(after > next, "id {after} again after a truncate in replica role");
}

/// A sweep that ends a claim while a session claim replaces it (the sweep's
/// statement waits for the new claim's commit) counts the run once.
#[test]
fn a_sweep_racing_a_session_claim_counts_the_abandoned_run_once() {
    let db = fresh_db("queue_admin_sweep_race_counts");
    let mut c = connect(&db);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
         VALUES ('t', 'job', '0 0 1 1 *', now())",
    )
    .expect("a task");
    c.batch_execute("SELECT distlock.try_acquire_task_lease(1, 'L', '1 second')").expect("lease claim");
    eventually("the lease to run out", std::time::Duration::from_secs(5), || {
        count(&mut c, "SELECT 1 FROM distlock.running_tasks WHERE NOT holder_alive") == 1
    });
    let mut claimer = connect(&db);
    claimer.batch_execute("BEGIN; SELECT distlock.try_acquire_task_lock(1, 'S')").expect("session claim, open");
    let sweep_db = db.clone();
    let sweep = std::thread::spawn(move || {
        connect_to(primary_port(), &sweep_db, "racing-sweep")
            .batch_execute("SELECT * FROM distlock.check_and_recover_timeout_tasks()")
            .expect("sweep")
    });
    eventually("the sweep to wait for the open claim", std::time::Duration::from_secs(10), || {
        count(&mut c, "SELECT 1 FROM pg_stat_activity WHERE application_name = 'racing-sweep' AND wait_event_type = 'Lock'") == 1
    });
    claimer.batch_execute("COMMIT").expect("commit the session claim");
    sweep.join().expect("sweep thread");
    assert_eq!(
        scalar(&mut c, "SELECT concat_ws('/', runs_completed, runs_failed, runs_timed_out, runs_abandoned) FROM distlock.task_schedule"),
        Some("0/0/0/1".into())
    );
}
