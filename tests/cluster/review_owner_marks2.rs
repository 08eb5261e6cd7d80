//! Second review of lock owners in `distlock.lock_waits` (branch
//! owner-marks at 6119f14): each test here fails on that commit.
//!
//! - in a SQL_ASCII database an owner that is short but not UTF-8 (any
//!   session can set one: `set_config('distlock.owner', 'a' || chr(255),
//!   false)`) is shown as it is, because every byte string is valid
//!   SQL_ASCII, so one tenant's connection makes `lock_waits` unreadable
//!   (22021) for every UTF-8 reader that may see its owner (the console,
//!   `pg-distlock locks`);
//! - the labels are gone, but the owner-level deadlock check still confirms
//!   a guess of another tenant's owner name: a connection of tenant b that
//!   names itself after a guess and waits for a lock tenant a's owner holds
//!   gets 40P01 within deadlock_timeout when the guess is right and a plain
//!   timeout when it is wrong.

use crate::lock_owner_view::{cancel_waits, lock, patient_conn};
use crate::owner_deadlocks::{advisory_waits, outcome_in_thread};
use crate::review_owner_marks::db_with_encoding;
use crate::support::*;

#[test]
fn review_owner_marks2_a_short_non_utf8_owner_in_a_sql_ascii_database_leaves_lock_waits_readable() {
    let db = db_with_encoding("rvmarks2_sql_ascii", "SQL_ASCII");
    let mut holder = patient_conn(&db, None);
    // SQL_ASCII takes any bytes; chr(255) is one byte 0xff there.
    holder
        .batch_execute("SELECT pg_catalog.length(pg_catalog.set_config('distlock.owner', 'b.worker' || pg_catalog.chr(255), false))")
        .expect("owner");
    lock(&mut holder, "rvm2-sa");
    let holder_pid = backend_pid(&mut holder);
    let mut watch = connect(&db);
    let wait = outcome_in_thread(patient_conn(&db, None), "SELECT distlock.lock('rvm2-sa')".into());
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
            "one session's owner that is not UTF-8 makes lock_waits unreadable to every UTF-8 client of a \
             SQL_ASCII database (pg_verifymbstr accepts any bytes there, so shown() never escapes them): {e}"
        )
    });
    let shown = shown.first().cloned().flatten().expect("the holder's owner");
    assert!(shown.starts_with("b.worker"), "the owner, its other bytes escaped: {shown}");
}

/// What a wait of tenant b's connection named `guess`, for the lock tenant
/// a's owner holds, comes to: "40P01", or "f" (p_timeout ran out). b sets
/// nothing but its owner (deadlock_timeout is the server's, 1 s).
fn wait_named(db: &str, role: &str, guess: &str) -> String {
    // b logs in as its role: the owner's node is keyed by the login role
    // (a session that can SET ROLE to both tenants can act as either).
    let url = format!("host=127.0.0.1 port={} user={role} dbname={db}", primary_port());
    let mut b = Client::connect(&url, NoTls).expect("b logs in");
    b.batch_execute(&format!("SET distlock.owner = '{guess}'")).expect("b's session");
    let outcome = match b.query_one("SELECT distlock.lock('a.ledger', p_timeout => '4s')::text", &[]) {
        Ok(row) => row.get::<_, String>(0),
        Err(e) => e.code().map(|s| s.code().to_string()).unwrap_or_else(|| e.to_string()),
    };
    outcome
}

#[test]
fn review_owner_marks2_another_tenant_cannot_confirm_a_guess_of_an_owner_through_the_deadlock_check() {
    let db = fresh_db("rvmarks2_guess");
    let mut c = connect(&db);
    let role = "rvmarks2_guess_worker_b";
    ensure_role(&mut c, role);
    c.batch_execute(&format!("ALTER ROLE {role} LOGIN")).expect("login");
    c.batch_execute(&format!("SELECT distlock.grant_capability('{role}', 'worker', 'b.')")).expect("grant");
    // Tenant a's owner holds its ledger on one connection.
    let secret_owner = "a.worker-7/thread-1";
    let mut a = patient_conn(&db, Some(secret_owner));
    lock(&mut a, "a.ledger");
    let right = wait_named(&db, role, secret_owner);
    let wrong = wait_named(&db, role, "a.worker-8/thread-1");
    drop(a);
    assert_eq!(
        right, wrong,
        "tenant b learns whether a guess is tenant a's owner name (40P01 for the right guess, a timeout for a \
         wrong one): the oracle 6119f14 closed for labels is still open through the deadlock check, which joins \
         any connection into any owner by its name alone"
    );
}
