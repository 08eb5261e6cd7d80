//! Each side's lock owner in `distlock.lock_waits` (issue 47, item 2): what
//! lets the console and `pg-distlock locks` join a client's connections into
//! one node and mark a deadlock across them, which pg_blocking_pids never
//! shows as a cycle. Scoped monitors see other tenants' owners only as an
//! opaque label, the same for every connection of one owner.

use std::collections::BTreeSet;

use crate::owner_deadlocks::{advisory_waits, outcome_in_thread};
use crate::support::*;

/// A connection of `owner` (none: its own owner) that does not break an
/// owner cycle while the test looks at it.
pub(crate) fn patient_conn(db: &str, owner: Option<&str>) -> Client {
    let mut c = connect(db);
    c.batch_execute("SET deadlock_timeout = '10min'; SET lock_timeout = '30s'").expect("settings");
    if let Some(owner) = owner {
        c.batch_execute(&format!("SET distlock.owner = '{owner}'")).expect("owner");
    }
    c
}

pub(crate) fn lock(c: &mut Client, name: &str) {
    assert_eq!(scalar(c, &format!("SELECT distlock.lock('{name}')")).as_deref(), Some("t"), "lock {name}");
}

/// (blocked_owner, blocking_owner) of every row, NULL as "-".
fn owner_pairs(c: &mut Client) -> BTreeSet<(String, String)> {
    c.query("SELECT coalesce(blocked_owner, '-'), coalesce(blocking_owner, '-') FROM distlock.lock_waits", &[])
        .expect("lock_waits")
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// Cancels the waits of `db` (the test's waiters) so their threads end.
pub(crate) fn cancel_waits(c: &mut Client, db: &str) {
    c.batch_execute(&format!(
        "SELECT pg_cancel_backend(l.pid) FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
          WHERE l.locktype = 'advisory' AND NOT l.granted AND d.datname = '{db}'"
    ))
    .expect("cancel");
}

#[test]
fn lock_waits_names_the_owners_of_a_cycle_across_connections() {
    let db = fresh_db("owner_view_cycle");
    let mut holder1 = patient_conn(&db, Some("svc/one"));
    let mut holder2 = patient_conn(&db, Some("svc/two"));
    lock(&mut holder1, "ledger-a");
    lock(&mut holder2, "ledger-b");
    // A backend without an owner holds a third lock: its side reads NULL.
    let mut ownerless = patient_conn(&db, None);
    lock(&mut ownerless, "ledger-c");
    let mut watch = connect(&db);
    let waits = [
        outcome_in_thread(patient_conn(&db, Some("svc/one")), "SELECT distlock.lock('ledger-b')".into()),
        outcome_in_thread(patient_conn(&db, Some("svc/two")), "SELECT distlock.lock('ledger-a')".into()),
        outcome_in_thread(patient_conn(&db, Some("svc/three")), "SELECT distlock.lock('ledger-c')".into()),
    ];
    advisory_waits(&mut watch, &db, |n| n == 3);
    let pairs = owner_pairs(&mut watch);
    cancel_waits(&mut watch, &db);
    for wait in waits {
        let (outcome, _) = wait.join().expect("a waiter");
        assert_eq!(outcome, "57014", "cancelled, not broken: the cycle stayed while the test looked");
    }
    let expected: BTreeSet<(String, String)> = [("svc/one", "svc/two"), ("svc/two", "svc/one"), ("svc/three", "-")]
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    assert_eq!(pairs, expected, "each side's owner; an owner cycle svc/one <-> svc/two across four pids");
}

#[test]
fn a_scoped_monitor_sees_owners_named_in_its_scope_only() {
    let db = fresh_db("owner_view_scoped");
    let mut c = connect(&db);
    let monitor = "owner_view_monitor_a";
    ensure_role(&mut c, monitor);
    // pg_read_all_stats: pg_stat_activity shows others' waits only to it.
    c.batch_execute(&format!(
        "SELECT distlock.grant_capability('{monitor}', 'monitor', 'a.'); GRANT pg_read_all_stats TO {monitor}"
    ))
    .expect("grant");
    // Tenant b's owner holds a lock named in a's scope on two connections
    // (shared), and a's owner waits for it exclusively.
    let mut b1 = patient_conn(&db, Some("b.worker/secret-host:1"));
    let mut b2 = patient_conn(&db, Some("b.worker/secret-host:1"));
    for b in [&mut b1, &mut b2] {
        assert_eq!(scalar(b, "SELECT distlock.lock('a.shared', p_shared => true)").as_deref(), Some("t"));
    }
    let mut watch = connect(&db);
    let wait = outcome_in_thread(patient_conn(&db, Some("a.worker/7")), "SELECT distlock.lock('a.shared')".into());
    advisory_waits(&mut watch, &db, |n| n == 1);
    let seen_by_a = as_role(&mut c, monitor, owner_pairs);
    let seen_by_owner = owner_pairs(&mut c);
    cancel_waits(&mut watch, &db);
    assert_eq!(wait.join().expect("waiter").0, "57014");

    assert_eq!(
        seen_by_owner,
        BTreeSet::from([("a.worker/7".to_string(), "b.worker/secret-host:1".to_string())]),
        "the unscoped reader sees every name"
    );
    assert_eq!(
        seen_by_a,
        BTreeSet::from([("a.worker/7".to_string(), "-".to_string())]),
        "its own owner by name, another tenant's not at all"
    );
}

#[test]
fn a_long_owner_is_cut_at_a_whole_character_and_stays_told_apart() {
    let db = fresh_db("owner_view_long");
    // 200 two-byte characters: cut to whole characters within the 256 bytes
    // kept, then marked with the owner's hash, so two names equal in their
    // first 256 bytes do not read alike.
    let common = "é".repeat(200);
    let mut c1 = patient_conn(&db, Some(&format!("{common}/thread-1")));
    let mut c2 = patient_conn(&db, Some(&format!("{common}/thread-2")));
    lock(&mut c1, "long-1");
    lock(&mut c2, "long-2");
    let mut watch = connect(&db);
    let shown: Vec<String> = [backend_pid(&mut c1), backend_pid(&mut c2)]
        .iter()
        .map(|pid| scalar(&mut watch, &format!("SELECT distlock.lock_owner({pid})")).expect("an owner"))
        .collect();
    for name in &shown {
        assert!(name.starts_with(&"é".repeat(128)), "whole characters kept: {name}");
        assert!(!name.contains(&"é".repeat(129)), "256 bytes at most kept: {name}");
        let hash = name.rsplit_once("...#").map(|(_, h)| h).unwrap_or_default();
        assert!(hash.len() == 16 && hash.chars().all(|ch| ch.is_ascii_hexdigit()), "cut, marked with the hash: {name}");
    }
    assert_ne!(shown[0], shown[1], "two owners never read alike");
    let unknown = scalar(&mut watch, "SELECT coalesce(distlock.lock_owner(0), 'null')");
    assert_eq!(unknown.as_deref(), Some("null"), "no backend, no owner");
}

#[test]
fn lock_waits_shows_this_databases_waits_only() {
    let here = fresh_db("owner_view_here");
    let there = fresh_db("owner_view_there");
    let mut holder = patient_conn(&there, Some("svc/elsewhere"));
    lock(&mut holder, "elsewhere");
    let wait = outcome_in_thread(patient_conn(&there, Some("svc/elsewhere-2")), "SELECT distlock.lock('elsewhere')".into());
    let mut watch_there = connect(&there);
    advisory_waits(&mut watch_there, &there, |n| n == 1);
    let seen_there = count(&mut watch_there, "SELECT 1 FROM distlock.lock_waits");
    let seen_here = count(&mut connect(&here), "SELECT 1 FROM distlock.lock_waits WHERE blocked_owner LIKE 'svc/elsewhere%'");
    cancel_waits(&mut watch_there, &there);
    assert_eq!(wait.join().expect("waiter").0, "57014");
    assert_eq!(seen_there, 1, "the wait shows in its own database");
    assert_eq!(seen_here, 0, "and not in another");
}

#[test]
fn a_change_of_owner_shows_at_once_and_an_owner_without_locks_not_at_all() {
    let db = fresh_db("owner_view_assign");
    let mut c = patient_conn(&db, Some("svc/before"));
    let pid = backend_pid(&mut c);
    let mut watch = connect(&db);
    let shown = |watch: &mut Client| scalar(watch, &format!("SELECT coalesce(distlock.lock_owner({pid}), 'null')"));
    assert_eq!(shown(&mut watch).as_deref(), Some("null"), "an owner set, but no lock of pg_distlock's");
    lock(&mut c, "assign-1");
    assert_eq!(shown(&mut watch).as_deref(), Some("svc/before"));
    // A pooler hands the connection on: the setting changes with the lock
    // still held (a DISCARD ALL would also drop it), and no lock call follows.
    c.batch_execute("SET distlock.owner = 'svc/after'").expect("set");
    assert_eq!(shown(&mut watch).as_deref(), Some("svc/after"), "published by the setting's assign hook");
    c.batch_execute("BEGIN; SET LOCAL distlock.owner = 'svc/local'").expect("set local");
    assert_eq!(shown(&mut watch).as_deref(), Some("svc/local"));
    c.batch_execute("ROLLBACK").expect("rollback");
    assert_eq!(shown(&mut watch).as_deref(), Some("svc/after"), "the rollback restores it");
    c.batch_execute("RESET distlock.owner").expect("reset");
    assert_eq!(shown(&mut watch).as_deref(), Some("null"), "no owner: its own");
}
