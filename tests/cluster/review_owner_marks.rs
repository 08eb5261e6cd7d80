//! Review of lock owners in `distlock.lock_waits` (branch owner-marks at
//! 51d1beb): each test here fails on that commit.
//!
//! - `lock_owner_published(pid)` answers for any pid: a scoped monitor reads
//!   a label for every backend of the database that published an owner,
//!   though it waits for nothing and its locks are outside the scope, where
//!   an unknown pid reads NULL (lease_backend_connected is keyed by task so
//!   that nobody can probe sessions);
//! - the label is a hash of the name alone, and the monitor can publish any
//!   name itself: its own backend's label confirms a guess of another
//!   tenant's owner name ("nothing of the name" does not hold);
//! - a monitor without pg_read_all_stats reads the full owner of a session
//!   pg_stat_activity hides from it;
//! - the owner stays published after DISCARD ALL: a pooled connection's
//!   waits are shown as its previous client's;
//! - in a SQL_ASCII database a long owner is cut in the middle of a UTF-8
//!   character, and lock_waits can no longer be read by a UTF-8 client;
//! - a read that overlaps two changes of owner returns a mix of both names
//!   (the hash checked before and after is the same: A, B, A);
//! - an owner whose bytes are not valid text of the database encoding (a
//!   role setting made in a LATIN1 database, a startup packet) reads NULL,
//!   "no owner", though the deadlock check counts it as one.

use std::collections::BTreeSet;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::lock_owner_view::{cancel_waits, lock, patient_conn};
use crate::owner_deadlocks::{advisory_waits, outcome_in_thread};
use crate::support::*;


/// A role with the monitor capability in `db` (scoped to `scope` unless
/// None), and, scoped alike, the worker capability (lock calls).
fn monitor_role(c: &mut Client, role: &str, scope: Option<&str>) {
    ensure_role(c, role);
    let scope = scope.map_or("NULL".to_string(), |s| format!("'{s}'"));
    c.batch_execute(&format!(
        "SELECT distlock.grant_capability('{role}', 'monitor', {scope}); \
         SELECT distlock.grant_capability('{role}', 'worker', {scope});"
    ))
    .expect("grant");
}

fn owner_of(c: &mut Client, pid: i32) -> String {
    scalar(c, &format!("SELECT coalesce(distlock.lock_owner({pid}), 'null')")).expect("a row")
}

#[test]
fn review_owner_marks_a_scoped_monitor_cannot_probe_backends_outside_its_scope() {
    let db = fresh_db("rvmarks_probe");
    let mut c = connect(&db);
    let monitor = "rvmarks_probe_monitor_a";
    monitor_role(&mut c, monitor, Some("a."));
    // Tenant b's connection holds a lock of its own and waits for nothing:
    // no view shows it to a's monitor.
    let mut b = patient_conn(&db, Some("b.worker/secret-host:1"));
    lock(&mut b, "b.ledger");
    let b_pid = backend_pid(&mut b);
    let (probed, unknown, published) = as_role(&mut c, monitor, |c| {
        (owner_of(c, b_pid), owner_of(c, 0), scalar(c, &format!("SELECT coalesce(distlock.lock_owner_published({b_pid}), 'null')")))
    });
    assert_eq!(unknown, "null", "no backend, no owner");
    assert_eq!(
        (probed.as_str(), published.as_deref()),
        ("null", Some("null")),
        "a backend outside the monitor's scope answers as an unknown pid does (lease_backend_connected is keyed \
         by task for this): otherwise every pid can be tried, and the labels tell which of another tenant's \
         connections are one client and when its owners change"
    );
}

#[test]
fn review_owner_marks_a_scoped_monitor_cannot_confirm_a_guess_of_another_tenants_owner() {
    let db = fresh_db("rvmarks_guess");
    let mut c = connect(&db);
    let monitor = "rvmarks_guess_monitor_a";
    monitor_role(&mut c, monitor, Some("a."));
    c.batch_execute(&format!("GRANT pg_read_all_stats TO {monitor}")).expect("read all stats");
    // Tenant b's owner holds a lock a's worker waits for: the row is a's to
    // see, b's owner a label.
    let secret = "b.worker/secret-host:1";
    let mut b = patient_conn(&db, Some(secret));
    lock(&mut b, "a.shared");
    let mut watch = connect(&db);
    let wait = outcome_in_thread(patient_conn(&db, Some("a.worker/7")), "SELECT distlock.lock('a.shared')".into());
    advisory_waits(&mut watch, &db, |n| n == 1);
    // a's monitor publishes its guess of b's owner on its own connection
    // (a lock in its own scope) and reads its own backend's label.
    let (label_of_b, label_of_guess, label_of_wrong_guess) = as_role(&mut c, monitor, |c| {
        let label_of_b = scalar(c, "SELECT coalesce(blocking_owner, 'null') FROM distlock.lock_waits").expect("a row");
        c.batch_execute("SET distlock.owner = 'b.worker/other-host:1'; SELECT distlock.lock('a.probe-1')").expect("publish");
        let wrong = scalar(c, "SELECT coalesce(distlock.lock_owner(pg_backend_pid()), 'null')").expect("a row");
        c.batch_execute(&format!("SET distlock.owner = '{secret}'; SELECT distlock.lock('a.probe-2')")).expect("publish");
        let guess = scalar(c, "SELECT coalesce(distlock.lock_owner(pg_backend_pid()), 'null')").expect("a row");
        c.batch_execute("SELECT distlock.unlock_all(); RESET distlock.owner").expect("clean up");
        (label_of_b, guess, wrong)
    });
    cancel_waits(&mut watch, &db);
    assert_eq!(wait.join().expect("waiter").0, "57014");
    // (At 51d1beb b's owner read as a label, owner#<hash>, that the right
    // guess reproduced.) Now an owner outside the scope reads as none at all,
    // whoever published it: nothing to compare.
    assert_eq!(
        (label_of_b.as_str(), label_of_guess.as_str(), label_of_wrong_guess.as_str()),
        ("null", "null", "null"),
        "a scoped monitor reads nothing of an owner outside its scope, so it cannot confirm a guess"
    );
}

#[test]
fn review_owner_marks_a_monitor_reads_no_owner_of_a_session_pg_stat_activity_hides() {
    let db = fresh_db("rvmarks_stats");
    let mut c = connect(&db);
    // Unscoped, and without pg_read_all_stats: pg_stat_activity hides other
    // roles' sessions' client, query and waits from it, and so does
    // lock_waits (docs/privileges.md).
    let monitor = "rvmarks_stats_monitor";
    monitor_role(&mut c, monitor, None);
    c.batch_execute(&format!("REVOKE pg_read_all_stats FROM {monitor}")).expect("no stats");
    let mut other = patient_conn(&db, Some("billing/db-host-17.internal:4242"));
    lock(&mut other, "billing.run");
    let pid = backend_pid(&mut other);
    let (hidden_query, owner) = as_role(&mut c, monitor, |c| {
        (scalar(c, &format!("SELECT query FROM pg_stat_activity WHERE pid = {pid}")), owner_of(c, pid))
    });
    assert_eq!(hidden_query.as_deref(), Some("<insufficient privilege>"), "pg_stat_activity hides the session");
    assert_eq!(owner, "null", "nor does lock_owner show its owner (often a host name): {owner}");
}

#[test]
fn review_owner_marks_a_pooled_connection_does_not_keep_its_previous_clients_owner() {
    let db = fresh_db("rvmarks_pooled");
    let mut holder = patient_conn(&db, None);
    holder.batch_execute("SELECT pg_advisory_lock(4242)").expect("hold");
    // The previous client of a pooled connection locked and unlocked as its
    // owner; the pooler resets the connection before handing it on.
    let mut pooled = patient_conn(&db, Some("svc/previous-client"));
    lock(&mut pooled, "pool-x");
    for reset in ["SELECT distlock.unlock('pool-x')", "DISCARD ALL", "SET lock_timeout = '30s'"] {
        pooled.batch_execute(reset).expect(reset);
    }
    assert_eq!(scalar(&mut pooled, "SELECT current_setting('distlock.owner')").as_deref(), Some(""), "no owner now");
    let pooled_pid = backend_pid(&mut pooled);
    // The next client waits for a lock that is not pg_distlock's.
    let wait = outcome_in_thread(pooled, "SELECT pg_advisory_lock(4242)".into());
    let mut watch = connect(&db);
    advisory_waits(&mut watch, &db, |n| n == 1);
    let shown = scalar(
        &mut watch,
        &format!("SELECT coalesce(blocked_owner, 'null') FROM distlock.lock_waits WHERE blocked_pid = {pooled_pid}"),
    );
    let direct = owner_of(&mut watch, pooled_pid);
    holder.batch_execute("SELECT pg_advisory_unlock(4242)").expect("let go");
    assert_eq!(wait.join().expect("waiter").0, "granted");
    assert_eq!(
        (shown.as_deref(), direct.as_str()),
        (Some("null"), "null"),
        "after DISCARD ALL the connection has no owner; shown as the previous client's, its waits join that \
         owner's node and the console marks cycles that are not there"
    );
}

/// The table a reader that found a mix writes to, which stops the writer.
fn watch_setup(db: &str) {
    connect(db).batch_execute("CREATE TABLE rvmarks_torn_done (v text)").expect("table");
}

/// A database of encoding `encoding` with pg_distlock, made fresh.
pub(crate) fn db_with_encoding(name: &str, encoding: &str) -> String {
    let mut admin = connect("postgres");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).expect("drop");
    admin
        .batch_execute(&format!(
            "CREATE DATABASE {name} TEMPLATE template0 ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C'"
        ))
        .expect("create database");
    connect(name).batch_execute("CREATE EXTENSION pg_distlock").expect("extension");
    name.to_string()
}

#[test]
fn review_owner_marks_lock_waits_reads_in_a_sql_ascii_database_with_a_long_owner() {
    let db = db_with_encoding("rvmarks_sql_ascii", "SQL_ASCII");
    // 301 bytes of UTF-8 (SQL_ASCII keeps a client's bytes as they come):
    // byte 256 is the first of a two-byte character.
    let owner = format!("x{}", "é".repeat(150));
    let mut holder = patient_conn(&db, Some(&owner));
    lock(&mut holder, "sa-1");
    let holder_pid = backend_pid(&mut holder);
    let mut watch = connect(&db);
    let wait = outcome_in_thread(patient_conn(&db, None), "SELECT distlock.lock('sa-1')".into());
    advisory_waits(&mut watch, &db, |n| n == 1);
    let read = watch
        .query("SELECT blocking_owner FROM distlock.lock_waits WHERE blocking_pid = $1", &[&holder_pid])
        .map(|rows| rows.iter().map(|r| r.get::<_, Option<String>>(0)).collect::<Vec<_>>())
        .map_err(described);
    cancel_waits(&mut watch, &db);
    assert_eq!(wait.join().expect("waiter").0, "57014");
    drop((holder, watch));
    let _ = connect("postgres").batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"));
    let shown = read.unwrap_or_else(|e| {
        panic!(
            "lock_waits cannot be read by a UTF-8 client once an owner is cut inside a character \
             (pg_mbcliplen of SQL_ASCII cuts bytes): {e}"
        )
    });
    let shown = shown.first().cloned().flatten().expect("the holder's owner");
    assert!(shown.starts_with(&format!("x{}", "é".repeat(100))), "the owner, cut at a whole character: {shown}");
}

#[test]
fn review_owner_marks_an_owner_read_while_its_backend_switches_owners_is_never_a_mix() {
    let db = fresh_db("rvmarks_torn");
    let a = format!("a.{}", "x".repeat(250));
    let b = format!("b.{}", "y".repeat(250));
    // One connection (a pooled one the Python client sets an owner on per
    // lock) switches between two owners as fast as it can.
    let mut writer = connect(&db);
    let writer_pid = backend_pid(&mut writer);
    watch_setup(&db);
    let writer_sql = format!(
        "DO $$ DECLARE t0 timestamptz := clock_timestamp(); i bigint := 0; BEGIN \
           WHILE clock_timestamp() < t0 + interval '60 s' LOOP \
             i := i + 1; \
             IF i % 1000 = 0 AND EXISTS (SELECT FROM rvmarks_torn_done) THEN EXIT; END IF; \
             PERFORM set_config('distlock.owner', CASE WHEN i % 2 = 0 THEN '{a}' ELSE '{b}' END, false); \
             PERFORM distlock.try_lock('a.tear'); PERFORM distlock.unlock('a.tear'); \
           END LOOP; END $$"
    );
    let writer = outcome_in_thread(writer, writer_sql);
    let mut watch = connect(&db);
    eventually("the writer to publish", Duration::from_secs(10), || owner_of(&mut watch, writer_pid) != "null");
    // Readers (more processes than cores, so that they are preempted) read
    // its owner until one reads something that was never its owner. A race:
    // caught within 45 s in 2 of 5 runs (10 s here, to spare CI) on a loaded two-core machine
    // (a fixed read, a seqlock, never fails it).
    let readers: Vec<JoinHandle<Option<String>>> = (0..3)
        .map(|_| {
            let (mut c, a, b) = (connect(&db), a.clone(), b.clone());
            std::thread::spawn(move || {
                c.batch_execute(&format!(
                    "DO $$ DECLARE v text; t0 timestamptz := clock_timestamp(); BEGIN \
                       WHILE clock_timestamp() < t0 + interval '10 s' LOOP \
                         v := distlock.lock_owner_published({writer_pid}); \
                         IF v IS NOT NULL AND v <> '{a}' AND v <> '{b}' THEN \
                           PERFORM set_config('rvmarks.torn', v, false); \
                           INSERT INTO rvmarks_torn_done VALUES (v); RETURN; \
                         END IF; \
                       END LOOP; END $$"
                ))
                .expect("reader");
                scalar(&mut c, "SELECT nullif(current_setting('rvmarks.torn', true), '')")
            })
        })
        .collect();
    let mixes: BTreeSet<String> = readers.into_iter().filter_map(|r| r.join().expect("reader")).collect();
    watch.batch_execute("INSERT INTO rvmarks_torn_done VALUES (NULL)").expect("stop the writer");
    assert_eq!(writer.join().expect("writer").0, "granted");
    assert!(
        mixes.is_empty(),
        "a read overlapping two changes of owner (A, B, A: the hash before and after is A's) returns bytes of \
         both, a name nobody published (and, when the scopes differ, B's bytes under A's name): {mixes:?}"
    );
}

#[test]
fn review_owner_marks_an_owner_that_is_not_valid_text_still_reads_as_an_owner() {
    let db = fresh_db("rvmarks_bad_text");
    // A setting made in a LATIN1 database for this (UTF-8) one keeps its
    // LATIN1 bytes: every connection of the role here gets 'svc\xe9' as its
    // owner (so does one whose client sends it in the startup packet).
    let latin1 = db_with_encoding("rvmarks_latin1", "LATIN1");
    connect(&latin1)
        .batch_execute(&format!("ALTER ROLE postgres IN DATABASE {db} SET distlock.owner = 'svc\u{e9}'"))
        .expect("role setting");
    let _ = connect("postgres").batch_execute(&format!("DROP DATABASE IF EXISTS {latin1} WITH (FORCE)"));
    let mut holder = patient_conn(&db, None);
    assert_eq!(
        scalar(&mut holder, "SELECT octet_length(current_setting('distlock.owner'))").as_deref(),
        Some("4"),
        "the holder's owner is svc and the LATIN1 byte"
    );
    lock(&mut holder, "bad-text-1");
    let holder_pid = backend_pid(&mut holder);
    let mut watch = connect(&db);
    let wait = outcome_in_thread(patient_conn(&db, Some("svc/waiter")), "SELECT distlock.lock('bad-text-1')".into());
    advisory_waits(&mut watch, &db, |n| n == 1);
    let shown = scalar(
        &mut watch,
        &format!("SELECT coalesce(blocking_owner, 'null') FROM distlock.lock_waits WHERE blocking_pid = {holder_pid}"),
    );
    cancel_waits(&mut watch, &db);
    assert_eq!(wait.join().expect("waiter").0, "57014");
    watch.batch_execute(&format!("ALTER ROLE postgres IN DATABASE {db} RESET distlock.owner")).expect("reset");
    assert_ne!(
        shown.as_deref(),
        Some("null"),
        "the holder has an owner (the deadlock check makes its connections one node), but lock_waits shows \
         NULL, a connection without one: the console cannot mark a cycle through it (a label would do)"
    );
}
