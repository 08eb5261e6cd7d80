//! Breaks a fresh-eyes review found in "Fencing by identity" (380ac33) and
//! "Scoped reads that cannot leak" (e9d75fc), each written as a test that
//! failed there; and those a second review found in the claim lock, the
//! library guard and the job lease cap (13a0ebd, 1aa8da6); and those a third
//! found in their mends (e939f6b, 7dbbb68).

use crate::fencing_identity::{claim, valid};
use crate::support::*;

fn task(c: &mut Client, id: i32, name: &str, timeout: &str) {
    c.execute(
        "INSERT INTO distlock.scheduled_tasks (id, task_name, task_type, next_run_at, timeout) \
         VALUES ($1, $2, 'job', now(), $3::text::interval)",
        &[&id, &name, &timeout],
    )
    .expect("task");
}

/// Same-backend identity is not claim identity: the holder's backend loses
/// its lock (DISCARD ALL: a pooler handing it to another client), then that
/// same backend claims the task again in a transaction it has not
/// committed. The old token is still the committed current one, its holder
/// pid and backend start match, and that backend holds the lock: every
/// other session accepts the lost token.
#[test]
fn a_lost_token_is_revived_when_the_same_backend_claims_again_uncommitted() {
    let db = fresh_db("review_same_backend");
    let mut admin = connect(&db);
    let mut pooled = connect_to(primary_port(), &db, "pooled-backend");
    let mut third = connect_to(primary_port(), &db, "third");
    task(&mut admin, 1, "t1", "1 hour");
    let lost = claim(&mut pooled, 1, "client-x");
    pooled.batch_execute("DISCARD ALL").expect("pooler reset");
    assert!(!valid(&mut third, 1, lost), "refused once the lock is gone");
    pooled.batch_execute("BEGIN").expect("begin");
    let reclaimed: bool = pooled
        .query_one("SELECT distlock.try_acquire_task_lock(1, 'client-y')", &[])
        .expect("claim")
        .get(0);
    assert!(reclaimed);
    let revived = valid(&mut third, 1, lost);
    pooled.batch_execute("ROLLBACK").expect("rollback");
    assert!(!revived, "the lost token {lost} was accepted while the same backend's new claim is uncommitted");
}

/// The lost holder takes the task's legacy tag from plain SQL
/// (pg_advisory_lock(task_lock_class(), id), which docs/tasks.md
/// documents): its 0.4.0 claim's token is valid again from every session,
/// though pg_distlock never gave the lock back.
#[test]
fn a_lost_token_is_revived_by_the_legacy_tag_taken_from_sql() {
    let db = fresh_db("review_legacy_revive");
    let mut admin = connect(&db);
    let mut holder = connect_to(primary_port(), &db, "holder");
    task(&mut admin, 1, "t1", "1 hour");
    let lost = claim(&mut holder, 1, "holder");
    holder.batch_execute("SELECT pg_advisory_unlock_all()").expect("lose the lock");
    assert!(!valid(&mut admin, 1, lost));
    holder.batch_execute("SELECT pg_advisory_lock(distlock.task_lock_class(), 1)").expect("legacy tag");
    assert!(!valid(&mut admin, 1, lost), "a lost token came back through the SQL-reachable legacy tag");
}

/// check_fencing_token compares backend start times through
/// pg_stat_get_activity, whose backend table is read once per transaction:
/// a checker that already checked once in its transaction refuses a live
/// token held by a backend that connected after that.
#[test]
fn a_live_token_is_refused_inside_a_checkers_transaction() {
    let db = fresh_db("review_stat_snapshot");
    let mut admin = connect(&db);
    let mut first = connect_to(primary_port(), &db, "first");
    let mut checker = connect_to(primary_port(), &db, "checker");
    task(&mut admin, 1, "t1", "1 hour");
    task(&mut admin, 2, "t2", "1 hour");
    let t1 = claim(&mut first, 1, "first");
    checker.batch_execute("BEGIN").expect("begin");
    assert!(valid(&mut checker, 1, t1));
    // A worker that connects now and claims (and commits) task 2.
    let mut late = connect_to(primary_port(), &db, "late");
    let t2 = claim(&mut late, 2, "late");
    assert!(valid(&mut admin, 2, t2), "valid to a fresh transaction");
    let in_transaction = valid(&mut checker, 2, t2);
    checker.batch_execute("COMMIT").expect("commit");
    assert!(in_transaction, "the live token {t2} was refused inside the checker's transaction");
}

/// The sweep's new evader path terminates the holder pid of any overdue
/// claim it could not row-lock, without asking whether that backend still
/// holds the claim: here the holder lost its lock long ago and its backend
/// now runs an unrelated long transaction, while another sweep (still in
/// its transaction) holds the row lock. The innocent backend is terminated.
#[test]
fn the_sweep_does_not_terminate_a_backend_that_no_longer_holds_the_claim() {
    let db = fresh_db("review_evader_innocent");
    let mut admin = connect(&db);
    let mut innocent = connect_to(primary_port(), &db, "innocent");
    let mut first_sweep = connect_to(primary_port(), &db, "first-sweep");
    task(&mut admin, 1, "t1", "1 second");
    claim(&mut innocent, 1, "innocent");
    let pid = backend_pid(&mut innocent);
    innocent.batch_execute("SELECT pg_advisory_unlock_all()").expect("lose the claim");
    innocent.batch_execute("BEGIN; SELECT 1").expect("an unrelated long transaction");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    first_sweep
        .batch_execute("BEGIN; SELECT * FROM distlock.check_and_recover_timeout_tasks(60)")
        .expect("first sweep, still in its transaction");
    admin.batch_execute("SELECT * FROM distlock.check_and_recover_timeout_tasks(60)").expect("second sweep");
    let alive = count(&mut admin, &format!("SELECT 1 FROM pg_stat_activity WHERE pid = {pid}"));
    first_sweep.batch_execute("COMMIT").expect("commit");
    assert_eq!(alive, 1, "the sweep terminated backend {pid}, which held nothing of task 1");
}

fn two_tenants(name: &str) -> (Client, String, String, String) {
    let db = fresh_db(name);
    let mut c = connect_to(primary_port(), &db, "review");
    let (a, b) = (format!("{name}_a"), format!("{name}_b"));
    for (role, scope) in [(&a, "a."), (&b, "b.")] {
        c.batch_execute(&format!("DROP ROLE IF EXISTS {role}; CREATE ROLE {role}")).expect("role");
        for capability in ["worker", "producer", "consumer", "monitor"] {
            c.batch_execute(&format!("SELECT distlock.grant_capability('{role}', '{capability}', '{scope}')"))
                .expect("grant");
        }
    }
    (c, db, a, b)
}

/// (SQLSTATE or "ok", message with the id replaced, rows returned).
fn answer(c: &mut Client, role: &str, sql: &str) -> (String, String, usize) {
    as_role(c, role, |c| match c.query(sql, &[]) {
        Ok(rows) => ("ok".into(), String::new(), rows.len()),
        Err(e) => {
            let db = e.as_db_error().expect("a server error");
            (db.code().code().to_string(), db.message().to_string(), 0)
        }
    })
}

/// complete_tasks and settle_and_consume_tasks (the batch settle paths)
/// skip require_job_in_scope: B's job held by worker "wb" answers A with
/// 42501 naming B's role, an unknown id with no row / a 'refused' row.
#[test]
fn batch_settles_tell_a_job_outside_the_scope_from_an_unknown_id() {
    let (mut c, _db, a, b) = two_tenants("review_batch_settle");
    let job: i64 = as_role(&mut c, &b, |c| {
        let job: i64 = c.query_one("SELECT distlock.enqueue_task('b.job', '{}', p_queue => 'b.jobs')", &[]).expect("enqueue").get(0);
        c.batch_execute("SELECT * FROM distlock.consume_task('wb', '1 hour')").expect("b holds its job");
        job
    });
    let unknown = 987_654_321_i64;
    let mut differences = Vec::new();
    for template in [
        "SELECT * FROM distlock.complete_tasks(ARRAY[JOB]::bigint[], 'wb')",
        "SELECT * FROM distlock.complete_tasks(ARRAY[JOB]::bigint[], 'wb', ARRAY[1])",
        "SELECT * FROM distlock.settle_and_consume_tasks(1, 'wb', p_completed => ARRAY[JOB]::bigint[])",
        "SELECT * FROM distlock.settle_and_consume_tasks(1, 'wb', p_failed => ARRAY[JOB]::bigint[])",
    ] {
        let theirs = answer(&mut c, &a, &template.replace("JOB", &job.to_string()));
        let none = answer(&mut c, &a, &template.replace("JOB", &unknown.to_string()));
        if theirs.0 != none.0 || theirs.1.contains(&b) {
            differences.push(format!("{template}: B's job {theirs:?}, unknown id {none:?}"));
        }
    }
    assert!(differences.is_empty(), "{differences:#?}");
}

/// release_task_lease / renew_task_lease never ask require_task: for B's
/// lease-mode claim, A gets 42501 naming B's role for the right token,
/// 55000 for a wrong one: a scoped worker learns B's live token (tokens are
/// sequential), which check_fencing_token refuses to tell it, and B's role.
#[test]
fn lease_releases_outside_the_scope_tell_the_token_and_the_role() {
    let (mut c, _db, a, b) = two_tenants("review_lease_oracle");
    c.batch_execute("INSERT INTO distlock.scheduled_tasks (id, task_name, task_type) VALUES (10, 'b.leased', 'etl')")
        .expect("task");
    let token: i64 = as_role(&mut c, &b, |c| {
        c.query_one("SELECT distlock.try_acquire_task_lease(10, 'wb', '1 hour')", &[]).expect("lease").get(0)
    });
    let mut told = Vec::new();
    for template in [
        "SELECT distlock.release_task_lease(10, TOKEN, 'completed')",
        "SELECT distlock.renew_task_lease(10, TOKEN, '1 hour')",
    ] {
        let right = answer(&mut c, &a, &template.replace("TOKEN", &token.to_string()));
        let wrong = answer(&mut c, &a, &template.replace("TOKEN", &(token + 1000).to_string()));
        if right.0 != wrong.0 || right.1.contains(&b) {
            told.push(format!("{template}: right token {right:?}, wrong token {wrong:?}"));
        }
        assert_ne!(right.0, "ok", "A acted on B's claim");
    }
    assert!(told.is_empty(), "{told:#?}");
}

/// Break 1. The pre-0.4.0 fallback ("holder holds the task lock and no claim
/// lock of the task") also covers a 0.4.0 claim, and a 0.4.0 backend holds
/// the task lock without any claim lock between try_lock_task and lock_claim
/// (claim_for_session runs legacy::may_claim and claim_task.sql in between).
/// A holder that lost its claim and claims the task again is inside that
/// window for as long as claim_task.sql waits, e.g. behind an admin's row
/// lock on the task: its lost token is accepted the whole time.
#[test]
fn a_lost_claims_token_stays_refused_while_its_old_holder_claims_again() {
    let db = fresh_db("review2_fallback_window");
    let mut admin = connect(&db);
    let mut holder = connect_to(primary_port(), &db, "holder");
    let mut third = connect_to(primary_port(), &db, "third");
    task(&mut admin, 1, "payroll", "1 hour");
    let task_id = 1;
    let lost = claim(&mut holder, task_id, "holder");
    holder.batch_execute("SELECT pg_advisory_unlock_all()").expect("lose the claim");
    assert!(!valid(&mut third, task_id, lost), "refused once the claim is lost");

    // An admin edits the task in an open transaction.
    admin.batch_execute("BEGIN").unwrap();
    admin
        .execute("SELECT 1 FROM distlock.scheduled_tasks WHERE id = $1 FOR UPDATE", &[&task_id])
        .expect("row lock");
    // The old holder claims again: takes the task lock, then waits on the row.
    let reclaim = std::thread::spawn(move || {
        let ok: bool = holder
            .query_one("SELECT distlock.try_acquire_task_lock($1, 'holder')", &[&task_id])
            .expect("re-claim")
            .get(0);
        ok
    });
    eventually("the re-claim waits on the task row", std::time::Duration::from_secs(10), || {
        count(
            &mut third,
            "SELECT 1 FROM pg_stat_activity WHERE application_name = 'holder' AND wait_event_type = 'Lock'",
        ) == 1
    });
    let accepted_in_window = valid(&mut third, task_id, lost);
    admin.batch_execute("COMMIT").unwrap();
    assert!(reclaim.join().unwrap(), "the re-claim succeeds");
    assert!(!valid(&mut third, task_id, lost));
    assert!(!accepted_in_window, "the lost token was accepted while its old holder was re-claiming");
}

/// Break 2. job_lease() measures a month as 30 days, but the lease is applied
/// as calendar months: '10000 years -3599999 days' counts as one day (passes
/// the 1-day cap) and leases the job for ~143 years. Same for
/// extend_task_lease, consume_tasks and settle_and_consume_tasks.
#[test]
fn max_job_lease_cannot_be_bypassed_with_a_mixed_sign_interval() {
    let db = fresh_db("review2_lease_cap");
    let mut c = connect(&db);
    c.batch_execute("SELECT distlock.enqueue_task('j1'); SELECT distlock.enqueue_task('j2')").unwrap();
    let took = c.query("SELECT task_id FROM distlock.consume_task('w', p_lease => '10000 years -3599999 days')", &[]);
    // Refusing it (22023) is fine; accepting it must not lease beyond the cap.
    if took.is_ok() {
        let days: f64 = c
            .query_one(
                "SELECT (extract(epoch FROM max(lease_expires_at) - now()) / 86400)::float8 FROM distlock.task_queue",
                &[],
            )
            .unwrap()
            .get(0);
        assert!(days <= 1.01, "consume_task leased a job for {days:.0} days under distlock.max_job_lease = 1 day");
    }
    let consumed = c.query("SELECT task_id FROM distlock.consume_task('w', p_lease => '1 hour')", &[]).unwrap();
    let job: i64 = consumed[0].get(0);
    let extended = c.query_one(
        "SELECT distlock.extend_task_lease($1, '1000 years -359999 days', 'w')",
        &[&job],
    );
    assert_eq!(sqlstate(extended), "22023", "extend_task_lease to ~14 years under a 1-day cap");
}

/// Break 4. library_guard refuses any library that is not *equal* to the SQL's
/// version, so from the next release on, the new library on a database not
/// yet updated (the state between installing and ALTER EXTENSION UPDATE that
/// src/version.rs and docs/upgrading.md promise keeps working) refuses every
/// write, with a hint ("Reconnect") that cannot help. Emulated as in
/// library_guard.rs: the guards name an older version than the library.
#[test]
fn a_newer_library_still_writes_to_a_database_not_yet_updated() {
    let db = fresh_db("review2_guard_newer_library");
    let mut c = connect(&db);
    c.batch_execute(
        "DO $$ DECLARE r record; BEGIN \
           FOR r IN SELECT tgrelid::regclass AS t FROM pg_trigger WHERE tgname = 'library_guard' LOOP \
             EXECUTE format('DROP TRIGGER library_guard ON %s', r.t); \
             EXECUTE format('CREATE TRIGGER library_guard BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON %s \
                             FOR EACH STATEMENT EXECUTE FUNCTION distlock.library_guard(%L)', r.t, '0.3.9'); \
           END LOOP; END $$",
    )
    .expect("guards of an older SQL version");
    let mut w = connect_to(primary_port(), &db, "worker");
    if let Err(e) = w.batch_execute("SELECT distlock.enqueue_task('x')") {
        panic!("the newer library may not write to the not-yet-updated database: {e}");
    }
}

/// The task whose id equals task_lock_class() (0x646c636b).
const CLASS_TASK: i32 = 0x646c_636b;

/// A task with id = task_lock_class() and the next token drawn congruent to
/// it mod 2^32: the 0.4.0 claim logs (id << 32) | (token & 0xffffffff),
/// which is exactly the pre-0.4.0 form (class << 32) | id.
fn colliding_claim(admin: &mut Client, holder: &mut Client) -> i64 {
    admin
        .execute(
            "INSERT INTO distlock.scheduled_tasks (id, task_name, task_type, next_run_at) VALUES ($1, 'c', 'job', now())",
            &[&CLASS_TASK],
        )
        .expect("task");
    admin
        .batch_execute(&format!("SELECT setval('distlock.fencing_token_seq', {})", CLASS_TASK as i64 - 1))
        .expect("setval");
    let token = claim(holder, CLASS_TASK, "holder");
    assert_eq!(token & 0xffff_ffff, CLASS_TASK as i64);
    token
}

/// A live 0.4.0 claim whose logged key equals the old form is taken for a
/// pre-0.4.0 claim: the fallback refuses the holder itself (pid ==
/// MyProcPid) and every other session (the holder holds a claim lock).
#[test]
fn a_live_claim_whose_key_looks_old_stays_valid() {
    let db = fresh_db("breaks_key_collision_live");
    let mut admin = connect(&db);
    let mut holder = connect_to(primary_port(), &db, "holder");
    let token = colliding_claim(&mut admin, &mut holder);
    assert!(valid(&mut holder, CLASS_TASK, token), "the holder's own live token {token} is refused");
    assert!(valid(&mut admin, CLASS_TASK, token), "the live token {token} is refused to others");
}

/// Same collision: the holder loses its locks, then takes the legacy tag
/// from plain SQL; the lost 0.4.0 token passes the pre-0.4.0 fallback.
#[test]
fn a_lost_claim_whose_key_looks_old_is_not_revived_by_the_legacy_tag() {
    let db = fresh_db("breaks_key_collision_lost");
    let mut admin = connect(&db);
    let mut holder = connect_to(primary_port(), &db, "holder");
    let lost = colliding_claim(&mut admin, &mut holder);
    holder.batch_execute("SELECT pg_advisory_unlock_all()").expect("lose the lock");
    assert!(!valid(&mut admin, CLASS_TASK, lost));
    holder
        .batch_execute(&format!("SELECT pg_advisory_lock(distlock.task_lock_class(), {CLASS_TASK})"))
        .expect("legacy tag");
    assert!(!valid(&mut admin, CLASS_TASK, lost), "lost token {lost} revived through the legacy tag");
}

/// Task leases still take any positive-by-30-day-months interval: a
/// negative part is accepted and the lease runs 143 years.
#[test]
fn a_task_lease_with_a_negative_part_is_refused() {
    let db = fresh_db("breaks_task_lease_negative");
    let mut admin = connect(&db);
    admin
        .batch_execute("INSERT INTO distlock.scheduled_tasks (id, task_name, task_type, next_run_at) VALUES (1, 't', 'job', now())")
        .expect("task");
    let r = admin.query_one("SELECT distlock.try_acquire_task_lease(1, 'w', '10000 years -3599999 days')", &[]);
    let years: Option<f64> = admin
        .query_one("SELECT extract(year FROM lease_expires_at - now())::float8 FROM distlock.scheduled_tasks WHERE id = 1", &[])
        .ok()
        .and_then(|row| row.get(0));
    assert!(r.is_err(), "lease with a negative part accepted (lease ends in {years:?} years)");
}

/// library_guard attached FOR EACH ROW (or INSTEAD OF) returns a NULL
/// pointer: PostgreSQL silently skips every row instead of refusing.
#[test]
fn library_guard_as_a_row_trigger_refuses_rather_than_dropping_rows() {
    let db = fresh_db("breaks_guard_row_trigger");
    let mut admin = connect(&db);
    admin
        .batch_execute(
            "CREATE TABLE g (x int);
             CREATE TRIGGER r BEFORE INSERT ON g FOR EACH ROW EXECUTE FUNCTION distlock.library_guard('0.4.0')",
        )
        .expect("setup");
    let inserted = admin.execute("INSERT INTO g VALUES (1)", &[]);
    assert!(inserted.is_err(), "row trigger silently dropped the row: {inserted:?}");
}
