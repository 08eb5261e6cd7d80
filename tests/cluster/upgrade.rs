//! Upgrading in place: a database created at each release and full of state is
//! updated with ALTER EXTENSION pg_distlock UPDATE while a worker holds a
//! claim; its state survives and keeps working, its schema equals a fresh
//! install's, and pg_dump/pg_restore of it works.

use std::collections::BTreeMap;
use std::process::Command;

use crate::support::*;

const FINGERPRINT: &str = include_str!("schema_fingerprint.sql");

fn current_version() -> String {
    let cargo = include_str!("../../Cargo.toml");
    cargo
        .lines()
        .find_map(|line| line.strip_prefix("version = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("version in Cargo.toml")
        .to_string()
}

fn new_database(port: u16, name: &str) -> Client {
    let mut admin = connect_to(port, "postgres", "upgrade-test");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).expect("drop");
    admin.batch_execute(&format!("CREATE DATABASE {name}")).expect("create database");
    connect_to(port, name, "upgrade-test")
}

fn lines(client: &mut Client, sql: &str) -> Vec<String> {
    client
        .simple_query(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).unwrap_or("NULL").to_string()),
            _ => None,
        })
        .collect()
}

fn fingerprint(client: &mut Client) -> Vec<String> {
    lines(client, FINGERPRINT)
}

/// Lines only one side has, for a readable failure.
fn difference(left: &[String], right: &[String]) -> String {
    let only_left: Vec<_> = left.iter().filter(|l| !right.contains(l)).map(|l| format!("- {l}")).collect();
    let only_right: Vec<_> = right.iter().filter(|l| !left.contains(l)).map(|l| format!("+ {l}")).collect();
    [only_left, only_right].concat().join("\n")
}

/// Every row of every distlock table, as text, over the columns the table
/// had at `columns` (so columns added later do not count as a change).
fn table_contents(client: &mut Client, columns: &BTreeMap<String, Vec<String>>) -> BTreeMap<String, Vec<String>> {
    // 0.3.0 moves completed jobs out of task_queue; the jobs view has them all.
    let jobs_view = one_bool(client, "SELECT to_regclass('distlock.jobs') IS NOT NULL");
    columns
        .iter()
        .map(|(table, cols)| {
            let list = cols.iter().map(|c| format!("t.{c}")).collect::<Vec<_>>().join(", ");
            let source = if table == "task_queue" && jobs_view { "jobs" } else { table.as_str() };
            let sql = format!("SELECT row({list})::text AS r FROM distlock.{source} t ORDER BY 1");
            (table.clone(), lines(client, &sql))
        })
        .collect()
}

fn table_columns(client: &mut Client) -> BTreeMap<String, Vec<String>> {
    let mut columns: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for row in client
        .query(
            "SELECT c.relname::text, a.attname::text FROM pg_class c \
               JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
              WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind = 'r' \
              ORDER BY c.relname, a.attnum",
            &[],
        )
        .expect("columns")
    {
        columns.entry(row.get(0)).or_default().push(row.get(1));
    }
    columns
}

fn one_i64(client: &mut Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
}

fn one_bool(client: &mut Client, sql: &str) -> bool {
    client.query_one(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e}")).get(0)
}

/// Tasks, claims (one left running on `worker`), log rows, queue jobs in
/// every status, a lease, an election, a semaphore, snowflake marks,
/// rate-limit rows and lock names, all written through 0.1.0's functions.
fn populate(c: &mut Client, worker: &mut Client) {
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at, timeout) VALUES \
           ('report', 'etl', '@hourly', now(), '1 hour'), \
           ('cleanup', 'etl', '@daily', now(), NULL), \
           ('flaky', 'etl', NULL, now(), NULL);",
    )
    .expect("tasks");
    worker
        .batch_execute(
            "SELECT distlock.try_acquire_task_lock(id, 'w1') FROM distlock.scheduled_tasks WHERE task_name = 'cleanup'; \
             SELECT distlock.release_task_lock(id, 'w1', 'completed') FROM distlock.scheduled_tasks WHERE task_name = 'cleanup'; \
             SELECT distlock.try_acquire_task_lock(id, 'w1') FROM distlock.scheduled_tasks WHERE task_name = 'flaky'; \
             SELECT distlock.release_task_lock(id, 'w1', 'failed', 'boom') FROM distlock.scheduled_tasks WHERE task_name = 'flaky';",
        )
        .expect("finished runs");
    let claimed: String = worker
        .query_one("SELECT task_name FROM distlock.worker_fetch_and_execute_task('w1')", &[])
        .expect("running claim")
        .get(0);
    assert_eq!(claimed, "report");

    // One job per status; priorities decide which job each consume takes.
    c.batch_execute(
        "SELECT distlock.enqueue_task('pending-job', '{\"n\": 1}', now(), -10); \
         SELECT distlock.enqueue_task('completed-job', '{\"n\": 2}', now(), 40); \
         SELECT * FROM distlock.consume_task('consumer-1'); \
         SELECT distlock.complete_task(id, 'consumer-1') FROM distlock.task_queue WHERE task_name = 'completed-job'; \
         SELECT distlock.enqueue_task('failed-job', '{\"n\": 3}', now(), 30); \
         SELECT * FROM distlock.consume_task('consumer-1'); \
         SELECT distlock.fail_task(id, 'smtp down', 'consumer-1') FROM distlock.task_queue WHERE task_name = 'failed-job'; \
         SELECT distlock.enqueue_task('dead-job', '{\"n\": 4}', now(), 20, 1); \
         SELECT * FROM distlock.consume_task('consumer-1'); \
         SELECT distlock.fail_task(id, 'bad input', 'consumer-1') FROM distlock.task_queue WHERE task_name = 'dead-job'; \
         SELECT distlock.enqueue_task('processing-job', '{\"n\": 5}', now(), 10); \
         SELECT * FROM distlock.consume_task('consumer-1', '1 hour');",
    )
    .expect("queue");
    // From 0.3.0 on completed jobs are archived; the jobs view shows them all.
    let jobs = if one_bool(c, "SELECT to_regclass('distlock.jobs') IS NOT NULL") { "jobs" } else { "task_queue" };
    assert_eq!(
        lines(c, &format!("SELECT status || ':' || task_name FROM distlock.{jobs} ORDER BY status")),
        ["completed:completed-job", "dead:dead-job", "failed:failed-job", "pending:pending-job", "processing:processing-job"]
    );

    c.batch_execute(
        "SELECT distlock.acquire_lease('primary-db', 'node-a', '1 hour'); \
         SELECT * FROM distlock.try_become_leader('scheduler', 'node-a', '1 hour'); \
         SELECT distlock.acquire_semaphore('pool', 3, 'node-a', '1 hour'); \
         SELECT distlock.generate_snowflake_id(7) FROM generate_series(1, 3); \
         SELECT distlock.check_rate_limit('api:alice', 2, 3600) FROM generate_series(1, 3); \
         SELECT * FROM distlock.throttle('api:bob', 1, 1, 3600); \
         SELECT distlock.lock('orders:42'); SELECT distlock.unlock('orders:42');",
    )
    .expect("coordination state");
}

/// `populate` through this library in a 0.1.0 database, when 0.1.0's own
/// library is not installed: the holds are taken with the role columns (and
/// the task lease column) added for the while, then dropped, leaving 0.1.0's
/// columns with the rows 0.1.0 would write (session claims leave the lease
/// column NULL).
fn populate_through_this_library(c: &mut Client, worker: &mut Client) {
    // This library records the role of every hold, so in a 0.1.0 database it
    // refuses to take one until the update has run.
    let refused = worker.batch_execute("SELECT distlock.acquire_lease('early', 'node-a', '1 hour')");
    assert_eq!(sqlstate(refused), "55000", "holds wait for ALTER EXTENSION UPDATE");
    const HOLD_TABLES: [&str; 5] = ["lease_state", "semaphore_holders", "leader_state", "task_queue", "task_execution_log"];
    for table in HOLD_TABLES {
        c.batch_execute(&format!("ALTER TABLE distlock.{table} ADD COLUMN holder_role oid")).expect("add role column");
    }
    c.batch_execute("ALTER TABLE distlock.scheduled_tasks ADD COLUMN lease_expires_at timestamptz").expect("add lease column");
    populate(c, worker);
    for table in HOLD_TABLES {
        c.batch_execute(&format!("ALTER TABLE distlock.{table} DROP COLUMN holder_role")).expect("drop role column");
    }
    assert_eq!(one_i64(c, "SELECT count(*) FROM distlock.scheduled_tasks WHERE lease_expires_at IS NOT NULL"), 0);
    c.batch_execute("ALTER TABLE distlock.scheduled_tasks DROP COLUMN lease_expires_at").expect("drop lease column");
}

/// A role 0.2.0's capabilities were granted to before the update.
const CAPABLE_ROLE: &str = "distlock_upgrade_worker";

/// `populate`, plus what 0.2.0 added: a lease-mode claim left running (its
/// holder may be gone; its token releases it) and a capability granted to
/// a role. Through 0.2.0's own library, or this one on 0.2.0's SQL.
fn populate_0_2_0(c: &mut Client, worker: &mut Client) {
    // A consumer waiting on an empty queue through 0.2.0's SQL looks at when
    // the next job is due, in tables without the queue column.
    assert_eq!(count(c, "SELECT 1 FROM distlock.consume_task('idle', '1 minute', '10 milliseconds')"), 0);
    populate(c, worker);
    c.batch_execute(&format!(
        "DO $$ BEGIN CREATE ROLE {CAPABLE_ROLE}; EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
         SELECT distlock.grant_capability('{CAPABLE_ROLE}', 'worker'); \
         INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
           VALUES ('nightly', 'etl', '@daily', now());"
    ))
    .expect("0.2.0 state");
    let leased: String = c
        .query_one("SELECT task_name FROM distlock.worker_fetch_and_execute_task('w3', '1 hour')", &[])
        .expect("lease-mode claim")
        .get(0);
    assert_eq!(leased, "nightly");
}

/// What 0.2.0's state must still do after the update.
fn check_0_2_0_state(c: &mut Client) {
    let (task, token): (i32, i64) = c
        .query_one(
            "SELECT task_id, fencing_token FROM distlock.task_execution_log l \
               JOIN distlock.scheduled_tasks t ON t.id = l.task_id \
              WHERE t.task_name = 'nightly' AND l.status = 'running'",
            &[],
        )
        .map(|row| (row.get(0), row.get(1)))
        .expect("the lease-mode claim taken at 0.2.0 is still running");
    assert!(one_bool(&mut *c, &format!("SELECT distlock.check_fencing_token({task}, {token})")));
    c.batch_execute(&format!("SELECT distlock.release_task_lease({task}, {token}, 'completed')"))
        .expect("the lease-mode claim taken at 0.2.0 is released by its token after the update");
    let leased = as_role(c, CAPABLE_ROLE, |c| {
        one_i64(c, "SELECT distlock.acquire_lease('capable', 'node-c', '1 minute')")
    });
    assert!(leased > 0, "the worker capability granted at 0.2.0 still lets its role take a lease");
    // It stays granted: the fresh install compared with gets the same
    // capabilities, and the dump and restore must keep them (issue 44, 13).
}

/// A role 0.3.0's producer capability was granted to before the update.
const PRODUCER_ROLE: &str = "distlock_upgrade_producer";

/// A role 0.3.0's consumer capability was granted to before the update,
/// which drops and creates the claim functions again (0.4.0 adds their
/// `queue` column) and so must grant them to it again.
const CONSUMER_ROLE: &str = "distlock_upgrade_consumer";

/// The three claim functions, each called so that it claims nothing.
const CLAIM_CALLS: [&str; 3] = [
    "distlock.consume_task('none', p_queues => ARRAY['upgrade-none'])",
    "distlock.consume_tasks(2, 'none', p_queues => ARRAY['upgrade-none'])",
    "distlock.settle_and_consume_tasks(2, 'none', p_queues => ARRAY['upgrade-none'])",
];

/// The result columns of each of CLAIM_CALLS, as prepared, and that each
/// runs (as the current role).
fn claim_columns(c: &mut Client) -> Vec<String> {
    CLAIM_CALLS
        .iter()
        .map(|call| {
            assert_eq!(count(c, &format!("SELECT * FROM {call}")), 0, "{call}");
            let statement = c.prepare(&format!("SELECT * FROM {call}")).unwrap_or_else(|e| panic!("{call}: {e}"));
            statement.columns().iter().map(|column| column.name()).collect::<Vec<_>>().join(",")
        })
        .collect()
}

const CLAIM_COLUMNS_0_3_0: &str = "task_id,task_name,payload,attempts,max_attempts,lease_expires_at,priority,worker_id";

/// `populate_0_2_0`, plus what 0.3.0 added: a queue limit, a pending job
/// with a unique key (behind every other pending job), a completed job in
/// the archive (populate's), and a producer and a consumer capability
/// granted under 0.3.0. The claim functions return 0.3.0's columns (this
/// library serves 0.3.0's SQL with 0.3.0's entry points).
fn populate_0_3_0(c: &mut Client, worker: &mut Client) {
    populate_0_2_0(c, worker);
    c.batch_execute(&format!(
        "DO $$ BEGIN CREATE ROLE {PRODUCER_ROLE}; EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
         SELECT distlock.grant_capability('{PRODUCER_ROLE}', 'producer'); \
         DO $$ BEGIN CREATE ROLE {CONSUMER_ROLE}; EXCEPTION WHEN duplicate_object THEN NULL; END $$; \
         SELECT distlock.grant_capability('{CONSUMER_ROLE}', 'consumer'); \
         SELECT distlock.set_queue_limit('default', 5); \
         SELECT distlock.enqueue_task('unique-job', '{{}}', now(), -20, p_unique_key => 'u-1');"
    ))
    .expect("0.3.0 state");
    check_0_3_0_claim_columns(c);
}

/// The claim functions of 0.3.0's SQL return 0.3.0's columns, whichever
/// library serves them.
fn check_0_3_0_claim_columns(c: &mut Client) {
    let columns = as_role(c, CONSUMER_ROLE, claim_columns);
    assert_eq!(
        columns,
        [CLAIM_COLUMNS_0_3_0.to_string(), CLAIM_COLUMNS_0_3_0.to_string(), format!("{CLAIM_COLUMNS_0_3_0},outcome")],
        "0.3.0's claim functions"
    );
}

/// What 0.3.0's state must still do after the update.
fn check_0_3_0_state(c: &mut Client) {
    check_0_2_0_state(c);
    let first = one_i64(c, "SELECT id FROM distlock.jobs WHERE task_name = 'unique-job'");
    let again = as_role(c, PRODUCER_ROLE, |c| {
        one_i64(c, "SELECT distlock.enqueue_task('unique-job', '{}', now(), -20, p_unique_key => 'u-1')")
    });
    assert_eq!(again, first, "the unique key of a job queued at 0.3.0 still holds after the update");
    // 0.4.0's enqueue functions take a group, and the producer granted at
    // 0.3.0 may call them; 0.3.0's, renamed, refuse new calls.
    let grouped = as_role(c, PRODUCER_ROLE, |c| {
        // Due tomorrow, so that the claims the checks make next do not take them.
        one_i64(c, "SELECT distlock.enqueue_task('grouped-job', p_run_after => now() + interval '1 day', p_group => 'g-1')")
            + one_i64(
                c,
                "SELECT count(*) FROM distlock.enqueue_tasks('grouped-job', ARRAY['{}']::jsonb[], \
                        now() + interval '1 day', p_group => 'g-1')",
            )
    });
    assert!(grouped > 1);
    assert_eq!(lines(c, "SELECT group_key FROM distlock.jobs WHERE task_name = 'grouped-job'"), ["g-1", "g-1"]);
    for call in [
        "SELECT distlock.enqueue_task_0_3_0('old', '{}', now(), 0, 5, 'default', NULL)",
        "SELECT distlock.enqueue_tasks_0_3_0('old', ARRAY['{}']::jsonb[], now(), 0, 5, 'default')",
    ] {
        assert_eq!(sqlstate(c.batch_execute(call)), "55000", "{call}");
    }
    assert_eq!(lines(c, "SELECT max_processing::text FROM distlock.queue_settings WHERE queue = 'default'"), ["5"]);
    let columns = as_role(c, CONSUMER_ROLE, claim_columns);
    assert_eq!(
        columns,
        [
            format!("{CLAIM_COLUMNS_0_3_0},queue,group_key"),
            format!("{CLAIM_COLUMNS_0_3_0},queue,group_key"),
            format!("{CLAIM_COLUMNS_0_3_0},outcome,queue,group_key")
        ],
        "the claim functions after the update, called by the consumer granted at 0.3.0"
    );
}

#[test]
fn a_populated_0_1_0_database_upgrades_in_place() {
    upgrade_in_place("0.1.0", |c, worker, through_old_library| {
        if through_old_library {
            populate(c, worker);
        } else {
            populate_through_this_library(c, worker);
        }
    }, |_| {});
}

#[test]
fn a_populated_0_2_0_database_upgrades_in_place() {
    upgrade_in_place("0.2.0", |c, worker, _| populate_0_2_0(c, worker), check_0_2_0_state);
}

#[test]
fn a_populated_0_3_0_database_upgrades_in_place() {
    upgrade_in_place("0.3.0", |c, worker, _| populate_0_3_0(c, worker), check_0_3_0_state);
}

/// Creates a database at `release`, fills it (`populate(c, worker,
/// through_old_library)`), updates it while `worker` keeps a claim, and
/// checks that its state survives and works (`check` adds the release's
/// own), that its schema is a fresh install's, and that pg_dump/pg_restore
/// of it works. With DISTLOCK_TEST_SWAP_LIBRARY set
/// (scripts/test_real_upgrades.sh) the server runs `release`'s own
/// library until that command renames this tree's into place.
fn upgrade_in_place(
    release: &str,
    populate: impl FnOnce(&mut Client, &mut Client, bool),
    check: impl FnOnce(&mut Client),
) {
    let port = plain_port();
    let suffix = release.replace('.', "_");
    let db = &format!("upgrade_from_{suffix}");
    let mut c = new_database(port, db);
    c.batch_execute(&format!("CREATE EXTENSION pg_distlock VERSION '{release}'")).expect("install the release");
    let mut worker = connect_to(port, db, "upgrade-worker");
    let worker_pid = backend_pid(&mut worker);
    let swap = std::env::var("DISTLOCK_TEST_SWAP_LIBRARY").ok();
    populate(&mut c, &mut worker, swap.is_some());
    let last_id = one_i64(&mut c, "SELECT distlock.generate_snowflake_id(7)");
    let old_columns = table_columns(&mut c);
    let before = table_contents(&mut c, &old_columns);
    for table in ["scheduled_tasks", "task_execution_log", "task_queue", "lease_state", "leader_state",
                  "semaphore_state", "semaphore_holders", "id_generator", "rate_limit_windows",
                  "rate_limit_gcra", "lock_names"] {
        assert!(before.get(table).is_some_and(|rows| !rows.is_empty()), "no rows in {table} to upgrade");
    }
    let max_task_token = one_i64(&mut c, "SELECT max(fencing_token) FROM distlock.task_execution_log");
    let lease_token = one_i64(&mut c, "SELECT token FROM distlock.lease_state");
    let term = one_i64(&mut c, "SELECT term FROM distlock.leader_state");

    if let Some(command) = &swap {
        // This tree's library renamed into place, as a package upgrade does:
        // new backends load it, the worker's keeps the old one mapped.
        let status = Command::new("sh").args(["-c", command]).status().expect("library swap");
        assert!(status.success(), "{command} failed");
    }
    if release == "0.3.0" {
        // Between installing this library and the update, a new session
        // loads this library, which serves 0.3.0's SQL with 0.3.0's entry
        // points (src/compat/v0_3_0.rs).
        check_0_3_0_claim_columns(&mut connect_to(port, db, "upgrade-early"));
    }
    // The worker keeps its session (and its claim) across the update.
    connect_to(port, db, "upgrade-admin").batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update");
    // A backend keeps running the library it loaded first (PostgreSQL finds a
    // loaded library by its path), so what follows asks a new session; only
    // the worker stays on the library it started with.
    let mut c = connect_to(port, db, "upgrade-test");
    assert_eq!(
        lines(&mut c, "SELECT extversion FROM pg_extension WHERE extname = 'pg_distlock'"),
        [current_version()]
    );

    // (a) all state is still there...
    assert_eq!(table_contents(&mut c, &old_columns), before, "rows changed by the update");
    check(&mut c);
    // ...and works: the claim taken before the update is released by its holder,
    let release =
        "SELECT distlock.release_task_lock(id, 'w1', 'completed') FROM distlock.scheduled_tasks WHERE task_name = 'report'";
    if swap.is_some() {
        // A session still running the old library may read but not write
        // (issue 44, item 6): a library before 0.4.0 has no library_guard, so
        // PostgreSQL refuses its writes with 42883. Reconnected, the worker's
        // old session and claim end, and the sweep abandons the claim.
        assert!(
            scalar(&mut worker, "SELECT count(*) FROM distlock.scheduled_tasks").is_some(),
            "the old library still reads"
        );
        assert_eq!(sqlstate(worker.batch_execute(release)), "42883", "the old library's release is refused");
        // It reads running_tasks too, where a claim made through the new
        // library names its backend: the view's check of that backend is a C
        // function the old library lacks, so it answers NULL there.
        c.batch_execute(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) VALUES ('upgrade-lease', 'x', now()); \
             SELECT distlock.try_acquire_task_lease(id, 'w3', '1 hour') FROM distlock.scheduled_tasks \
              WHERE task_name = 'upgrade-lease'",
        )
        .expect("a lease-mode claim through the new library");
        let lease_backend = "SELECT coalesce(lease_backend_alive::text, 'null') FROM distlock.running_tasks \
                              WHERE task_name = 'upgrade-lease'";
        assert_eq!(lines(&mut c, lease_backend), ["true"]);
        if suffix == "0_3_0" {
            assert_eq!(lines(&mut worker, lease_backend), ["null"], "the old library reads running_tasks");
            // And lock_waits, whose owner columns call a C function the old
            // library lacks: NULL there too, and the view still reads.
            assert_eq!(
                lines(&mut worker, "SELECT coalesce(distlock.lock_owner(pg_backend_pid()), 'null') || '/' || \
                                    (SELECT count(*) FROM distlock.lock_waits)"),
                ["null/0"],
                "the old library reads lock_waits"
            );
            assert_eq!(
                sqlstate(worker.simple_query("SELECT distlock.lock_owner_published(pg_backend_pid())")),
                "42883",
                "without the wrapper the old library could not"
            );
        } else {
            // Older libraries predate scopes: the view's in_monitor_scope,
            // a C function since 0.3.0, is not in them either.
            let error = worker.simple_query(lease_backend).expect_err("0.1.0's and 0.2.0's libraries lack in_monitor_scope");
            let message = error.as_db_error().map(|e| e.message().to_string()).unwrap_or_default();
            assert!(message.contains("in_monitor_scope"), "{message}");
        }
        c.batch_execute("DELETE FROM distlock.scheduled_tasks WHERE task_name = 'upgrade-lease'").expect("cleanup");
        drop(worker);
        worker = connect_to(port, db, "upgrade-worker");
        eventually("the old worker's session ends", std::time::Duration::from_secs(10), || {
            count(&mut c, &format!("SELECT 1 FROM pg_stat_activity WHERE pid = {worker_pid}")) == 0
        });
        let swept = lines(&mut c, "SELECT task_id::text FROM distlock.check_and_recover_timeout_tasks()");
        assert_eq!(swept.len(), 1, "the sweep abandons the old session's claim: {swept:?}");
    } else {
        worker.batch_execute(release).expect("the claim taken before the update is released after it");
    }
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'running'"), 0);
    // tokens, terms and IDs keep rising,
    assert!(one_bool(
        &mut worker,
        "SELECT distlock.try_acquire_task_lock(id, 'w2') FROM distlock.scheduled_tasks WHERE task_name = 'report'"
    ));
    let token = one_i64(&mut worker, "SELECT current_token FROM distlock.scheduled_tasks WHERE task_name = 'report'");
    assert!(token > max_task_token, "task token {token} after the update <= {max_task_token} before");
    // Tasks keep their UTC times (0.4.0's time zones): no zone of their own,
    // the setting's default, and the release schedules the next slot in UTC.
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.scheduled_tasks WHERE schedule_timezone IS NOT NULL"), 0);
    assert_eq!(lines(&mut c, "SELECT DISTINCT schedule_timezone FROM distlock.task_schedule"), ["UTC"]);
    // and today's missed-run behaviour: one run for all missed slots.
    assert_eq!(lines(&mut c, "SELECT DISTINCT missed_runs FROM distlock.task_schedule"), ["once"]);
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'skipped'"), 0);
    worker
        .batch_execute("SELECT distlock.release_task_lock(id, 'w2', 'completed') FROM distlock.scheduled_tasks WHERE task_name = 'report'")
        .expect("the claim after the update is released");
    assert!(one_bool(
        &mut c,
        "SELECT t.next_run_at = date_trunc('hour', l.completed_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '1 hour' \
           FROM distlock.scheduled_tasks t JOIN distlock.task_execution_log l ON l.task_id = t.id \
          WHERE t.task_name = 'report' AND l.worker_id = 'w2'"
    ));
    assert!(one_i64(&mut c, "SELECT distlock.acquire_lease('other', 'node-b', '1 hour')") > lease_token);
    assert!(one_bool(&mut c, "SELECT distlock.resign_leader('scheduler', 'node-a')"));
    assert!(one_i64(&mut c, "SELECT term FROM distlock.try_become_leader('scheduler', 'node-b', '1 hour')") > term);
    assert!(one_i64(&mut c, "SELECT distlock.generate_snowflake_id(7)") > last_id);
    // the lease, the semaphore, the queue, the rate limits and the names keep their meaning.
    assert!(one_bool(&mut c, "SELECT distlock.renew_lease('primary-db', 'node-a', '1 hour')"));
    assert_eq!(
        sqlstate(c.batch_execute("SELECT distlock.acquire_semaphore('pool', 1, 'node-b', '1 hour')")),
        "22023",
        "the semaphore keeps its limit while node-a holds a slot"
    );
    assert!(one_bool(&mut c, "SELECT distlock.acquire_semaphore('pool', 3, 'node-b', '1 hour')"));
    assert!(one_bool(
        &mut c,
        "SELECT distlock.complete_task(id, 'consumer-1') FROM distlock.task_queue WHERE task_name = 'processing-job'"
    ));
    // Jobs queued before the update are in queue 'default'.
    assert_eq!(lines(&mut c, "SELECT DISTINCT queue FROM distlock.jobs"), ["default"]);
    // The job completed before the update and the one completed after it are archived.
    assert_eq!(
        lines(&mut c, "SELECT task_name FROM distlock.completed_jobs ORDER BY id"),
        ["completed-job", "processing-job"]
    );
    assert_eq!(
        lines(&mut c, "SELECT task_name FROM distlock.consume_task('consumer-2', p_queues => ARRAY['default'])"),
        ["pending-job"]
    );
    // Unique keys work on the upgraded table.
    let unique = "SELECT distlock.enqueue_task('sync', p_queue => 'q', p_unique_key => 'k')";
    assert_eq!(one_i64(&mut c, unique), one_i64(&mut c, unique), "the second enqueue of a key returns the first job");
    assert!(!one_bool(&mut c, "SELECT distlock.check_rate_limit('api:alice', 2, 3600)"));
    assert!(!one_bool(&mut c, "SELECT allowed FROM distlock.throttle('api:bob', 1, 1, 3600, 2)"));
    assert!(one_bool(&mut c, "SELECT distlock.lock('orders:42')"));
    assert_eq!(
        lines(&mut c, "SELECT key_name FROM distlock.advisory_locks WHERE key = distlock.lock_id('orders:42')"),
        ["orders:42"]
    );

    // (b) the upgraded schema is exactly a fresh install's, but for 0.3.0's
    // claim functions, which the update keeps under other names for calls
    // running during it, callable by the owner alone.
    let (legacy, upgraded): (Vec<String>, Vec<String>) =
        fingerprint(&mut c).into_iter().partition(|line| line.contains("_0_3_0("));
    for function in [
        "consume_task_0_3_0",
        "consume_tasks_0_3_0",
        "settle_and_consume_tasks_0_3_0",
        "enqueue_task_0_3_0",
        "enqueue_tasks_0_3_0",
    ] {
        assert!(
            legacy.iter().any(|line| line.starts_with("member function distlock.") && line.contains(function)),
            "{function} is no member after the update: {legacy:?}"
        );
        let granted: Vec<String> = lines(
            &mut c,
            &format!(
                "SELECT r.rolname FROM pg_proc p CROSS JOIN LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) x \
                  JOIN pg_roles r ON r.oid = x.grantee \
                 WHERE p.proname = '{function}' AND x.grantee <> p.proowner \
                 UNION ALL SELECT 'PUBLIC' FROM pg_proc p CROSS JOIN LATERAL aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) x \
                 WHERE p.proname = '{function}' AND x.grantee = 0"
            ),
        );
        assert!(granted.is_empty(), "{function} is granted to {granted:?}");
    }
    let mut fresh = new_database(port, &format!("upgrade_fresh_{suffix}"));
    fresh.batch_execute("CREATE EXTENSION pg_distlock").expect("fresh install");
    // The capabilities granted before the update, granted on the fresh install too.
    let capable: Vec<(String, String)> = c
        .query("SELECT role::text, capability FROM distlock.role_capabilities ORDER BY 1, 2", &[])
        .expect("capabilities")
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    for (role, capability) in &capable {
        fresh
            .execute("SELECT distlock.grant_capability($1::text::regrole, $2::text)", &[role, capability])
            .expect("grant on the fresh install");
    }
    let fresh_print = fingerprint(&mut fresh);
    assert!(fresh_print.len() > 300, "the fingerprint reads too little: {} lines", fresh_print.len());
    assert!(
        upgraded == fresh_print,
        "the upgraded schema differs from a fresh install (- upgraded, + fresh):\n{}",
        difference(&upgraded, &fresh_print)
    );

    // (c) pg_dump / pg_restore of the upgraded database.
    drop(worker);
    let dump = format!("/tmp/pg_distlock_upgrade_{}.pgdump", std::process::id());
    pg_tool(port, "pg_dump", &["-Fc", "-f", &dump, db]);
    let restored_db = &format!("upgrade_restored_{suffix}");
    drop(new_database(port, restored_db));
    pg_tool(port, "pg_restore", &["--exit-on-error", "-d", restored_db, &dump]);
    let _ = std::fs::remove_file(&dump);
    let mut restored = connect_to(port, restored_db, "upgrade-test");
    for (role, capability) in &capable {
        let usage: bool = restored
            .query_one("SELECT has_schema_privilege($1::text, 'distlock', 'USAGE')", &[role])
            .expect("schema privilege")
            .get(0);
        assert!(usage, "{role} ({capability}, granted before the update) lost USAGE on distlock in the restore");
    }
    assert!(fingerprint(&mut restored) == fresh_print, "a restored upgraded database differs from a fresh install");
    let columns = table_columns(&mut c);
    let mut dumped = table_contents(&mut c, &columns);
    let mut restored_rows = table_contents(&mut restored, &columns);
    // Rate-limit state and the sweep's record are not dumped (documented);
    // a restored database draws its own lock-key secret.
    assert_ne!(restored_rows.get("lock_key_secret"), dumped.get("lock_key_secret"), "a restore draws a new secret");
    for table in ["rate_limit_windows", "rate_limit_gcra", "sweep_state", "lock_key_secret"] {
        dumped.remove(table);
        restored_rows.remove(table);
    }
    assert_eq!(restored_rows, dumped, "pg_restore did not bring back every dumped row");
}

/// Every C function that a released install script binds must still be in
/// the library, or a database not yet updated would fail to call it.
#[test]
fn the_library_exports_every_symbol_of_every_release() {
    let pkglibdir = Command::new(pg_bin("pg_config")).arg("--pkglibdir").output().expect("pg_config");
    let library = format!("{}/pg_distlock.so", String::from_utf8_lossy(&pkglibdir.stdout).trim());
    let nm = Command::new("nm").args(["-D", "--defined-only", &library]).output().expect("nm");
    let exported: std::collections::HashSet<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().last().map(str::to_string))
        .collect();
    for (release, script) in [
        ("0.1.0", include_str!("../../sql/pg_distlock--0.1.0.sql")),
        ("0.2.0", include_str!("../../sql/pg_distlock--0.2.0.sql")),
        ("0.3.0", include_str!("../../sql/pg_distlock--0.3.0.sql")),
    ] {
        let mut needed = Vec::new();
        for part in script.split("'MODULE_PATHNAME', '").skip(1) {
            let symbol = part.split('\'').next().expect("symbol");
            needed.push(symbol.to_string());
            needed.push(format!("pg_finfo_{symbol}"));
        }
        assert!(needed.len() > 80, "read only {} symbols from the {release} script", needed.len());
        let missing: Vec<_> = needed.iter().filter(|s| !exported.contains(*s)).collect();
        assert!(missing.is_empty(), "{library} lacks symbols {release}'s SQL binds: {missing:?}");
    }
}
