//! Standbys, pg_dump/pg_restore, and the lock_waits view.

use std::thread;
use std::time::Duration;

use crate::support::*;

#[test]
fn claims_are_refused_on_a_standby() {
    let db = fresh_db("ops_standby");
    connect(&db)
        .batch_execute("INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) VALUES ('t', 'x', now())")
        .expect("task");
    let mut standby =
        standby_showing(&db, "the standby to replay the database", "SELECT count(*) FROM distlock.scheduled_tasks");
    for call in [
        "SELECT distlock.try_acquire_task_lock(1, 'w')",
        "SELECT * FROM distlock.worker_fetch_and_execute_task('w')",
        "SELECT * FROM distlock.try_acquire_multiple_tasks('w')",
        "SELECT * FROM distlock.check_and_recover_timeout_tasks()",
    ] {
        let err = standby.execute(call, &[]).expect_err(call);
        assert_eq!(err.code().map(|c| c.code()), Some("25006"), "{call}: {err}");
        assert!(format!("{err:?}").contains("standby"), "{call}: {err:?}");
    }
    assert_eq!(count(&mut standby, "SELECT 1 FROM distlock.advisory_locks"), 0);
}

#[test]
fn pg_dump_and_restore_keep_tasks_history_and_token_order() {
    let source = fresh_db("ops_dump_source");
    let mut c = connect(&source);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
         SELECT 'job-' || i, 'etl', '@hourly', now() FROM generate_series(1, 5) i; \
         SELECT * FROM distlock.try_acquire_multiple_tasks('w', 5); \
         SELECT distlock.release_task_lock(id, 'w', 'completed') FROM distlock.scheduled_tasks;",
    )
    .expect("history");
    let max_token: i64 = c.query_one("SELECT max(fencing_token) FROM distlock.task_execution_log", &[]).expect("max").get(0);
    let dump = format!("/tmp/pg_distlock_dump_{}.pgdump", std::process::id());
    pg_tool(primary_port(), "pg_dump", &["-Fc", "-f", &dump, &source]);

    let target = "ops_dump_target";
    let mut admin = connect("postgres");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {target} WITH (FORCE)")).expect("drop");
    admin.batch_execute(&format!("CREATE DATABASE {target}")).expect("create");
    pg_tool(primary_port(), "pg_restore", &["--exit-on-error", "-d", target, &dump]);
    let _ = std::fs::remove_file(&dump);

    let mut restored = connect(target);
    assert_eq!(count(&mut restored, "SELECT 1 FROM distlock.scheduled_tasks"), 5);
    assert_eq!(count(&mut restored, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'completed'"), 5);
    restored
        .batch_execute(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) VALUES ('new', 'etl', now())",
        )
        .expect("serial continues after the restored ids");
    let token: i64 = restored
        .query_one("SELECT fencing_token FROM distlock.worker_fetch_and_execute_task('w')", &[])
        .expect("claim")
        .get(0);
    assert!(token > max_token, "fencing tokens keep increasing after a restore ({token} <= {max_token})");
}

#[test]
fn lock_waits_shows_who_blocks_whom() {
    let db = fresh_db("ops_waits");
    let mut holder = connect_to(primary_port(), &db, "holder-app");
    holder.batch_execute("SELECT pg_advisory_lock(4242)").expect("lock");
    let holder_pid = backend_pid(&mut holder);
    let waiter_db = db.clone();
    let (pid_tx, pid_rx) = std::sync::mpsc::channel();
    let waiter = thread::spawn(move || {
        let mut waiter = connect_to(primary_port(), &waiter_db, "waiter-app");
        pid_tx.send(backend_pid(&mut waiter)).expect("send pid");
        waiter.batch_execute("SELECT pg_advisory_lock(4242); SELECT pg_advisory_unlock(4242);").expect("wait");
    });
    let waiter_pid = pid_rx.recv().expect("pid");
    let mut monitor = connect(&db);
    eventually("the waiter to show in lock_waits", Duration::from_secs(10), || {
        count(
            &mut monitor,
            &format!(
                "SELECT 1 FROM distlock.lock_waits WHERE blocked_pid = {waiter_pid} AND blocking_pid = {holder_pid} \
                 AND blocked_application = 'waiter-app' AND blocking_application = 'holder-app' \
                 AND key_kind = 'bigint' AND key = 4242 AND waiting_for IS NOT NULL"
            ),
        ) == 1
    });
    assert_eq!(
        count(&mut monitor, "SELECT 1 FROM distlock.advisory_locks WHERE key = 4242 AND NOT granted AND waiting_for IS NOT NULL"),
        1
    );
    holder.batch_execute("SELECT pg_advisory_unlock(4242)").expect("unlock");
    waiter.join().expect("waiter finished once the lock was free");
}
