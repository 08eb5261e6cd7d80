//! Names in any database encoding, and the one rule every name obeys.

use crate::support::*;

/// A LATIN1 database: text arrives in the server as LATIN1 bytes, which
/// are not UTF-8 once a character is beyond ASCII.
fn latin1_db(port: u16, name: &str) -> Client {
    let mut admin = connect_to(port, "postgres", "cluster-test");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).expect("drop");
    admin
        .batch_execute(&format!(
            "CREATE DATABASE {name} ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
        ))
        .expect("create LATIN1 database");
    let mut c = connect_to(port, name, "cluster-test");
    c.batch_execute("CREATE EXTENSION pg_distlock").expect("create extension");
    c
}

fn text(c: &mut Client, sql: &str) -> String {
    c.query_one(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).get(0)
}

fn truth(c: &mut Client, sql: &str) -> bool {
    c.query_one(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).get(0)
}

#[test]
fn non_ascii_names_work_in_a_latin1_database() {
    for (mode, port) in storage_modes() {
        let mut c = latin1_db(port, "names_latin1");
        let encoding = text(&mut c, "SELECT pg_catalog.getdatabaseencoding()::text");
        assert_eq!(encoding, "LATIN1", "{mode}");

        // Locks: the Rust key is the SQL function's key, and the name is shown back.
        assert!(truth(&mut c, "SELECT distlock.try_lock('café')"), "{mode}: try_lock");
        assert_eq!(
            text(&mut c, "SELECT key_name FROM distlock.advisory_locks WHERE key = distlock.lock_id('café')"),
            "café",
            "{mode}: the held key is shown with its name"
        );
        assert!(truth(&mut c, "SELECT distlock.unlock('café')"), "{mode}: unlock");

        // Leases, semaphores, elections.
        assert!(truth(&mut c, "SELECT distlock.acquire_lease('bail', 'propriétaire', '1 minute') IS NOT NULL"), "{mode}");
        assert!(truth(&mut c, "SELECT distlock.renew_lease('bail', 'propriétaire', '1 minute')"), "{mode}");
        assert_eq!(text(&mut c, "SELECT owner FROM distlock.lease_state WHERE name = 'bail'"), "propriétaire", "{mode}");
        assert!(truth(&mut c, "SELECT distlock.release_lease('bail', 'propriétaire')"), "{mode}");
        assert!(truth(&mut c, "SELECT distlock.acquire_semaphore('sémaphore', 2, 'nöd', '1 minute')"), "{mode}");
        assert!(truth(&mut c, "SELECT distlock.release_semaphore('sémaphore', 'nöd')"), "{mode}");
        assert_eq!(
            text(&mut c, "SELECT leader FROM distlock.try_become_leader('grüppe', 'knöt', '1 minute')"),
            "knöt",
            "{mode}: the leader's name comes back"
        );
        assert!(truth(&mut c, "SELECT distlock.resign_leader('grüppe', 'knöt')"), "{mode}");

        // The queue hands back the names it stored.
        c.batch_execute("SELECT distlock.enqueue_task('tâche', '{\"clé\": \"é\"}')").expect("enqueue");
        let job = c
            .query_one("SELECT task_id, task_name, worker_id, payload->>'clé' FROM distlock.consume_task('wörker')", &[])
            .expect("consume");
        assert_eq!(job.get::<_, String>(1), "tâche", "{mode}");
        assert_eq!(job.get::<_, String>(2), "wörker", "{mode}");
        assert_eq!(job.get::<_, String>(3), "é", "{mode}");
        let job_id: i64 = job.get(0);
        assert!(truth(&mut c, &format!("SELECT distlock.complete_task({job_id}, 'wörker')")), "{mode}");

        // Rate limits key on the same bytes every time.
        assert!(truth(&mut c, "SELECT distlock.check_rate_limit('clé', 1, 3600)"), "{mode}");
        assert!(!truth(&mut c, "SELECT distlock.check_rate_limit('clé', 1, 3600)"), "{mode}: the second is refused");
        assert!(truth(&mut c, "SELECT allowed FROM distlock.throttle('clé', 1, 1, 3600)"), "{mode}");
        assert!(truth(&mut c, "SELECT distlock.reset_rate_limit('clé')"), "{mode}");

        // Scheduled tasks: claim and release under a non-ASCII worker id.
        c.batch_execute(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
             VALUES ('tâche planifiée', 'týpe', '0 * * * *', now() - interval '1 minute')",
        )
        .expect("task");
        let claim = c
            .query_one("SELECT task_id, task_name, task_type FROM distlock.worker_fetch_and_execute_task('wörker')", &[])
            .expect("claim");
        assert_eq!(claim.get::<_, String>(1), "tâche planifiée", "{mode}");
        assert_eq!(claim.get::<_, String>(2), "týpe", "{mode}");
        let task_id: i32 = claim.get(0);
        let wrong = c.query_one(&format!("SELECT distlock.release_task_lock({task_id}, 'àutre', 'completed')"), &[]);
        assert_eq!(sqlstate(wrong), "55000", "{mode}: another worker's release is refused, not a panic");
        c.batch_execute(&format!("SELECT distlock.release_task_lock({task_id}, 'wörker', 'failed', 'érreur')"))
            .expect("release");
        assert_eq!(
            text(&mut c, &format!("SELECT worker_id || ':' || error_message FROM distlock.task_execution_log WHERE task_id = {task_id}")),
            "wörker:érreur",
            "{mode}"
        );
    }
}

/// Every function that takes a name: (call with {} for the name, argument name).
const NAMED_CALLS: &[&str] = &[
    "SELECT distlock.lock({})",
    "SELECT distlock.try_lock({})",
    "SELECT distlock.unlock({})",
    "SELECT distlock.acquire_lease({}, 'owner', '1 minute')",
    "SELECT distlock.acquire_lease('lease', {}, '1 minute')",
    "SELECT distlock.renew_lease({}, 'owner', '1 minute')",
    "SELECT distlock.release_lease('lease', {})",
    "SELECT distlock.force_release_lease({})",
    "SELECT distlock.check_lease_token({}, 1)",
    "SELECT distlock.acquire_semaphore({}, 1, 'owner', '1 minute')",
    "SELECT distlock.acquire_semaphore('sem', 1, {}, '1 minute')",
    "SELECT distlock.release_semaphore({}, 'owner')",
    "SELECT * FROM distlock.try_become_leader({}, 'node', '1 minute')",
    "SELECT * FROM distlock.try_become_leader('group', {}, '1 minute')",
    "SELECT distlock.resign_leader('group', {})",
    "SELECT distlock.enqueue_task({})",
    "SELECT * FROM distlock.consume_task({})",
    "SELECT distlock.complete_task(1, {})",
    "SELECT distlock.check_rate_limit({}, 1, 60)",
    "SELECT * FROM distlock.throttle({}, 1, 1, 60)",
    "SELECT * FROM distlock.rate_limit_status({})",
    "SELECT distlock.reset_rate_limit({})",
    "SELECT * FROM distlock.worker_fetch_and_execute_task({})",
    "SELECT distlock.try_acquire_task_lock(1, {})",
];

#[test]
fn every_name_is_refused_when_blank_or_longer_than_1000_bytes_before_anything_is_written() {
    let db = fresh_db_on(plain_port(), "names_rule");
    let mut c = connect_to(plain_port(), &db, "cluster-test");
    let written = "SELECT (SELECT count(*) FROM distlock.lease_state) + (SELECT count(*) FROM distlock.semaphore_state) \
                   + (SELECT count(*) FROM distlock.leader_state) + (SELECT count(*) FROM distlock.task_queue) \
                   + (SELECT count(*) FROM distlock.rate_limit_windows) + (SELECT count(*) FROM distlock.rate_limit_gcra) \
                   + (SELECT count(*) FROM distlock.semaphore_holders) + (SELECT count(*) FROM distlock.lock_names)";
    let long = format!("'{}'", "é".repeat(501)); // 1002 bytes in UTF-8
    for call in NAMED_CALLS {
        for bad in ["''", "' '", "E'\\t\\n '", &long] {
            let sql = call.replace("{}", bad);
            let state = sqlstate(c.query(&sql, &[]));
            assert_eq!(state, "22023", "{sql}");
        }
    }
    let rows: i64 = c.query_one(written, &[]).expect("rows").get(0);
    assert_eq!(rows, 0, "no refused call wrote a row");

    // 1000 bytes is the limit, not 999.
    let longest = "é".repeat(500);
    assert!(truth(&mut c, &format!("SELECT distlock.acquire_lease('{longest}', '{longest}', '1 minute') IS NOT NULL")));
    assert!(truth(&mut c, &format!("SELECT distlock.try_lock('{longest}')")));
    c.batch_execute(&format!("SELECT distlock.enqueue_task('{longest}')")).expect("a 1000-byte task name");
    let task = c.execute(
        &format!("INSERT INTO distlock.scheduled_tasks (task_name, task_type) VALUES ('{longest}x', 't')"),
        &[],
    );
    assert_eq!(sqlstate(task), "23514", "a scheduled task's name obeys the same rule");
    let task = c.execute("INSERT INTO distlock.scheduled_tasks (task_name, task_type) VALUES (E'\\t', 't')", &[]);
    assert_eq!(sqlstate(task), "23514", "and may not be blank");
}

/// cron_next (and the scheduled_tasks trigger that calls it) answers a
/// non-ASCII expression with 22023 in a LATIN1 database too, not XX000.
#[test]
fn a_non_ascii_cron_expression_is_a_22023_in_a_latin1_database() {
    let mut c = latin1_db(plain_port(), "names_latin1_cron");
    let direct = c.batch_execute("SELECT distlock.cron_next('é * * * *', now())");
    assert_eq!(sqlstate(direct), "22023");
    let through_the_trigger = c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron) VALUES ('t', 'etl', 'é * * * *')",
    );
    assert_eq!(sqlstate(through_the_trigger), "22023");
}
