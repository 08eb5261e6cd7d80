//! pg_distlock's own locks live where pg_advisory_* cannot name them: a
//! session squatting on a task's or a lease's key from SQL blocks nothing;
//! claims made with 0.2.0's tag (by its library, still loaded in an old
//! session) stay exclusive and fenced across the update; grant waits are
//! bounded.

use std::time::{Duration, Instant};

use crate::support::*;

fn claim_one(client: &mut Client, worker: &str) -> Option<i32> {
    let row = client
        .query_one("SELECT task_id, acquired FROM distlock.worker_fetch_and_execute_task($1)", &[&worker])
        .expect("fetch");
    row.get::<_, bool>(1).then(|| row.get(0))
}

fn tasks(db: &str, n: i32) {
    connect(db)
        .batch_execute(&format!(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
             SELECT 'job-' || g, 'etl', '@daily', now() FROM generate_series(1, {n}) g"
        ))
        .expect("tasks");
}

/// A role with no capability at all holds a task's 0.2.0 key from SQL and
/// stays idle: the task is still claimed, in either mode, and blocked_tasks
/// lists nothing; an uncommitted claim is still explained there.
#[test]
fn a_session_holding_a_task_key_from_sql_blocks_nothing() {
    let db = fresh_db("tags_task_squatter");
    tasks(&db, 2);
    let mut admin = connect(&db);
    admin
        .batch_execute("DROP ROLE IF EXISTS distlock_squatter; CREATE ROLE distlock_squatter LOGIN")
        .expect("role");
    let mut squatter = connect(&db);
    squatter
        .batch_execute(
            "SET ROLE distlock_squatter; \
             SELECT pg_advisory_lock(1684824939, 1), pg_advisory_lock(1684824939, 2)",
        )
        .expect("the old task keys, from SQL");
    let mut worker = connect(&db);
    assert_eq!(claim_one(&mut worker, "w"), Some(1), "a session claim is not blocked");
    let lease: Option<i64> = worker
        .query_one("SELECT distlock.try_acquire_task_lease(2, 'w', '1 hour')", &[])
        .expect("lease claim")
        .get(0);
    assert!(lease.is_some(), "a lease-mode claim is not blocked");
    assert_eq!(count(&mut admin, "SELECT 1 FROM distlock.blocked_tasks"), 0, "nothing is blocked");
    assert_eq!(
        count(&mut admin, "SELECT 1 FROM distlock.advisory_locks WHERE is_task_lock AND task_id = 1"),
        1,
        "the claim's lock is shown once"
    );

    // A claim in a transaction that has not committed is still explained.
    let mut open = connect(&db);
    let open_pid = backend_pid(&mut open);
    worker.batch_execute("SELECT distlock.release_task_lock(1, 'w', 'completed')").expect("release");
    admin.batch_execute("UPDATE distlock.scheduled_tasks SET next_run_at = now() WHERE id = 1").expect("due again");
    open.batch_execute("BEGIN; SELECT distlock.try_acquire_task_lock(1, 'open')").expect("uncommitted claim");
    assert_eq!(count(&mut admin, &format!("SELECT 1 FROM distlock.blocked_tasks WHERE task_id = 1 AND pid = {open_pid}")), 1);
    open.batch_execute("ROLLBACK").expect("rollback");
}

/// A session holding a lease's old grant key from SQL no longer makes
/// acquire_lease wait; a grant that must wait for another transaction
/// granting the same name gives up at lock_timeout with 55P03.
#[test]
fn lease_grants_cannot_be_blocked_from_sql_and_wait_a_bounded_time() {
    let db = fresh_db("tags_lease_squatter");
    let mut squatter = connect(&db);
    squatter
        .batch_execute("SELECT pg_advisory_lock(1684827251, (distlock.lock_id('a-lease') & 4294967295)::bit(32)::int)")
        .expect("the old grant key, from SQL");
    let mut c = connect(&db);
    c.batch_execute("SET statement_timeout = '5s'").expect("timeout");
    assert!(scalar(&mut c, "SELECT distlock.acquire_lease('a-lease', 'me', '1 hour')").is_some());

    let mut granting = connect(&db);
    granting.batch_execute("BEGIN; SELECT distlock.acquire_lease('b-lease', 'first', '1 hour')").expect("open grant");
    c.batch_execute("SET lock_timeout = '300ms'").expect("lock_timeout");
    let started = Instant::now();
    let waited = c.batch_execute("SELECT distlock.acquire_lease('b-lease', 'second', '1 hour')");
    let took = started.elapsed();
    assert_eq!(sqlstate(waited), "55P03");
    assert!(took >= Duration::from_millis(250) && took < Duration::from_secs(4), "gave up after {took:?}");
    granting.batch_execute("COMMIT").expect("commit");
}

/// What 0.1.0's and 0.2.0's libraries do to claim task `task` in this
/// session: the legacy tag, then the claim row (no holder role, as 0.1.0).
fn claim_like_0_2_0(c: &mut Client, task: i32) -> i64 {
    c.batch_execute(&format!("SELECT pg_advisory_lock(1684824939, {task})")).expect("legacy tag");
    c.query_one(
        "WITH task AS ( \
             UPDATE distlock.scheduled_tasks SET current_token = nextval('distlock.fencing_token_seq'), last_run_at = now() \
              WHERE id = $1 RETURNING id, current_token) \
         INSERT INTO distlock.task_execution_log (task_id, worker_id, status, lock_id, holder_pid, holder_backend_start, fencing_token) \
         SELECT id, 'old-library', 'running', (1684824939::bigint << 32) | $1, pg_backend_pid(), \
                (SELECT backend_start FROM pg_stat_activity WHERE pid = pg_backend_pid()), current_token \
           FROM task RETURNING fencing_token",
        &[&task],
    )
    .expect("claim row")
    .get(0)
}

/// A claim taken with 0.2.0's tag before the update (by a session still
/// running that library) stays exclusive and fenced after it: no claim of
/// either mode overlaps it, its token checks true while its holder lives and
/// false once it is gone, and the sweep and running_tasks see its holder.
#[test]
fn a_claim_taken_with_the_0_2_0_tag_stays_exclusive_across_the_update() {
    let port = primary_port();
    let mut admin = connect_to(port, "postgres", "tags");
    admin.batch_execute("DROP DATABASE IF EXISTS tags_legacy_claim WITH (FORCE)").expect("drop");
    admin.batch_execute("CREATE DATABASE tags_legacy_claim").expect("db");
    let db = "tags_legacy_claim";
    connect(db).batch_execute("CREATE EXTENSION pg_distlock VERSION '0.2.0'").expect("0.2.0");
    tasks(db, 1);
    let mut old = connect(db);
    let old_pid = backend_pid(&mut old);
    let token = claim_like_0_2_0(&mut old, 1);
    // Producers keep working on 0.2.0's SQL until the update.
    assert!(scalar(&mut connect(db), "SELECT distlock.enqueue_task('before-update')").is_some());
    connect(db).batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update");

    let mut c = connect(db);
    let fenced = |c: &mut Client| -> bool {
        c.query_one("SELECT distlock.check_fencing_token(1, $1)", &[&token]).expect("check").get(0)
    };
    assert_eq!(claim_one(&mut c, "new"), None, "a session claim would overlap the old one");
    let lease: Option<i64> = c.query_one("SELECT distlock.try_acquire_task_lease(1, 'new', '1 hour')", &[]).expect("lease").get(0);
    assert_eq!(lease, None, "a lease-mode claim would overlap the old one");
    assert!(fenced(&mut c), "the old claim's token is current while its holder lives");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.running_tasks WHERE holder_alive"), 1);
    assert!(
        c.query("SELECT * FROM distlock.check_and_recover_timeout_tasks()", &[]).expect("sweep").is_empty(),
        "the sweep leaves a live claim"
    );

    c.execute("SELECT pg_terminate_backend($1, 5000)", &[&old_pid]).expect("terminate");
    assert!(!fenced(&mut c), "the token ends with its holder");
    assert_eq!(claim_one(&mut c, "new"), Some(1), "the task is claimed once the old holder is gone");
    // The new claim takes the legacy tag too, so an old library cannot claim beside it.
    let mut other = connect(db);
    let legacy_free: bool = other.query_one("SELECT pg_try_advisory_lock(1684824939, 1)", &[]).expect("try").get(0);
    assert!(!legacy_free, "a new claim leaves the legacy tag free for an old library");
}

/// Between installing this library and running ALTER EXTENSION UPDATE, a
/// database still on 0.1.0's SQL keeps answering the read-only calls: a
/// claim 0.1.0's library holds is fenced while its holder lives and not
/// once it is gone, leases check, and running_tasks sees the holder.
#[test]
fn read_only_calls_keep_answering_on_0_1_0_sql() {
    let port = primary_port();
    let mut admin = connect_to(port, "postgres", "tags");
    admin.batch_execute("DROP DATABASE IF EXISTS tags_old_sql WITH (FORCE)").expect("drop");
    admin.batch_execute("CREATE DATABASE tags_old_sql").expect("db");
    let db = "tags_old_sql";
    let mut c = connect(db);
    c.batch_execute(
        "CREATE EXTENSION pg_distlock VERSION '0.1.0'; \
         INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) VALUES ('old', 'etl', now()); \
         INSERT INTO distlock.lease_state (name, owner, token, acquired_at, renewed_at, expires_at) \
         VALUES ('old-lease', 'node-a', 7, now(), now(), now() + interval '1 hour');",
    )
    .expect("0.1.0 with a task and a lease");
    let mut old = connect(db);
    let old_pid = backend_pid(&mut old);
    let token = claim_like_0_2_0(&mut old, 1);

    let fenced = |c: &mut Client| -> bool {
        c.query_one("SELECT distlock.check_fencing_token(1, $1)", &[&token]).expect("check_fencing_token on 0.1.0's SQL").get(0)
    };
    assert!(fenced(&mut c), "the old claim's token is current while its holder lives");
    assert_eq!(scalar(&mut c, "SELECT distlock.check_lease_token('old-lease', 7)").as_deref(), Some("t"));
    assert_eq!(scalar(&mut c, "SELECT distlock.check_lease_token('old-lease', 6)").as_deref(), Some("f"));
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.running_tasks WHERE holder_alive"), 1);
    c.execute("SELECT pg_terminate_backend($1, 5000)", &[&old_pid]).expect("terminate");
    assert!(!fenced(&mut c), "the token ends with its holder");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.running_tasks WHERE holder_alive"), 0);
}

/// pg_distlock's statements that queue on a row (here a semaphore's, held
/// by a transaction that stays open) give up after 10 s with 55P03 when the
/// caller set no lock_timeout, and leave the caller's setting as it was.
#[test]
fn waits_on_a_row_another_transaction_holds_are_bounded() {
    let db = fresh_db("tags_bounded_rows");
    let mut holding = connect(&db);
    holding
        .batch_execute("BEGIN; SELECT distlock.acquire_semaphore('held-sem', 1, 'a', '1 hour')")
        .expect("a transaction that keeps the semaphore's row");
    let mut c = connect(&db);
    c.batch_execute("SET statement_timeout = '60s'").expect("a backstop");
    let started = Instant::now();
    let waited = c.batch_execute("SELECT distlock.acquire_semaphore('held-sem', 1, 'b', '1 hour')");
    let took = started.elapsed();
    holding.batch_execute("ROLLBACK").expect("rollback");
    assert_eq!(sqlstate(waited), "55P03");
    assert!(took >= Duration::from_millis(9500) && took < Duration::from_secs(30), "gave up after {took:?}");
    assert_eq!(scalar(&mut c, "SHOW lock_timeout").as_deref(), Some("0"), "the caller's lock_timeout is restored");
}
