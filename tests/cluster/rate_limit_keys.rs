//! Keys nobody can aim (issue 44, item 3): the shared rate-limit table is
//! placed by a hash keyed with a secret the server draws, one database may
//! fill only its share of it, and an operator can list and reset keys; the
//! locks pg_distlock takes on lease, election and queue names are keyed by
//! a secret of each database. 0.3.0 placed both with md5 bits that anyone
//! could match offline.

use std::time::Duration;

use md5::{Digest, Md5};

use crate::support::*;

/// 0.3.0's placement of a fixed-window key: md5(kind 1, database, key),
/// partition = first byte mod 16.
fn partition_0_3_0(database: u32, key: &str) -> u8 {
    let mut hasher = Md5::new();
    hasher.update([1u8]);
    hasher.update(database.to_le_bytes());
    hasher.update(key.as_bytes());
    hasher.finalize()[0] % 16
}

/// 0.3.0's key of a lease or election grant lock: the low 32 bits of the
/// first 8 bytes of md5(name), big-endian.
fn grant_key_0_3_0(name: &str) -> u32 {
    let digest = Md5::digest(name.as_bytes());
    u32::from_be_bytes(digest[4..8].try_into().expect("4 bytes"))
}

/// distlock.rate_limit_database_share set on the primary until dropped.
struct Share;

impl Share {
    fn set(percent: u32) -> Share {
        apply_share(&format!("ALTER SYSTEM SET distlock.rate_limit_database_share = {percent}"), &percent.to_string());
        Share
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        apply_share("ALTER SYSTEM RESET distlock.rate_limit_database_share", "100");
    }
}

fn apply_share(statement: &str, expected: &str) {
    let mut c = connect("postgres");
    c.batch_execute(statement).expect("share");
    c.batch_execute("SELECT pg_reload_conf()").expect("reload");
    eventually("the share is in effect", Duration::from_secs(10), || {
        scalar(&mut connect("postgres"), "SHOW distlock.rate_limit_database_share").as_deref() == Some(expected)
    });
}

/// Forgets every database's rate-limit keys on the primary, so that keys
/// other tests left live do not fill the small (64-key) table (keys of a
/// database still on an older version's SQL stay: none of the tests before
/// these leaves a live one there).
fn clear_every_database() {
    let mut c = connect("postgres");
    let databases: Vec<String> = c
        .query("SELECT datname FROM pg_database WHERE datallowconn AND NOT datistemplate", &[])
        .expect("databases")
        .iter()
        .map(|r| r.get(0))
        .collect();
    for db in databases {
        let mut d = connect(&db);
        // Databases of older tests may hold an older version's SQL.
        if count(&mut d, "SELECT 1 FROM pg_proc WHERE proname = 'reset_rate_limits'") == 1 {
            d.batch_execute("SELECT distlock.reset_rate_limits()").expect("reset");
        }
    }
}

fn database_oid(c: &mut postgres::Client) -> u32 {
    c.query_one("SELECT oid FROM pg_database WHERE datname = current_database()", &[]).expect("oid").get(0)
}

#[test]
fn a_database_cannot_crowd_out_another_databases_key() {
    let _share = Share::set(50);
    clear_every_database();
    let attacker_db = fresh_db("rl_flood_attacker");
    let victim_db = fresh_db("rl_flood_victim");
    let mut attacker = connect(&attacker_db);
    let mut victim = connect(&victim_db);
    let (attacker_oid, victim_oid) = (database_oid(&mut attacker), database_oid(&mut victim));

    // The reported attack: keys computed offline to land in the victim
    // key's partition, each held for 31 days... here a minute.
    let target = partition_0_3_0(victim_oid, "victim");
    let crafted = (0..)
        .map(|i| format!("flood-{i}"))
        .filter(|k| partition_0_3_0(attacker_oid, k) == target)
        .take(64);
    // Then as many more as the table takes.
    let mut share_refusals = 0;
    for key in crafted.chain((0..200).map(|i| format!("more-{i}"))) {
        if let Err(e) = attacker.query_one("SELECT distlock.check_rate_limit($1, 1, 60)", &[&key]) {
            assert_eq!(e.code().map(|c| c.code()), Some("53000"), "{e}");
            assert!(format!("{e:?}").contains("distlock.rate_limit_database_share"), "{e:?}");
            share_refusals += 1;
        }
    }
    assert!(share_refusals > 0, "264 live keys in a 64-key table: the attacker's database reaches its share");
    let live = count(&mut attacker, "SELECT 1 FROM distlock.rate_limit_keys()");
    assert!(live <= 32, "half of 64 slots at most, got {live}");

    let admitted: bool = victim
        .query_one("SELECT distlock.check_rate_limit('victim', 1, 60)", &[])
        .expect("the victim's key has room in its partition")
        .get(0);
    assert!(admitted);
    let cleared: i64 = attacker.query_one("SELECT distlock.reset_rate_limits()", &[]).expect("reset").get(0);
    assert_eq!(cleared, live);
    victim.batch_execute("SELECT distlock.reset_rate_limits()").expect("reset");
}

#[test]
fn a_scoped_monitor_lists_its_keys_and_an_admin_resets_them_by_prefix() {
    clear_every_database();
    for (mode, port) in storage_modes() {
        let db = fresh_db_on(port, &format!("rl_keys_{mode}"));
        let mut c = connect_to(port, &db, "rl_keys");
        let monitor = format!("{db}_monitor");
        c.batch_execute(&format!(
            "DROP ROLE IF EXISTS {monitor}; CREATE ROLE {monitor};
             SELECT distlock.grant_capability('{monitor}', 'monitor', 'a.');
             SELECT distlock.check_rate_limit('a.one', 5, 60);
             SELECT distlock.check_rate_limit('a.one', 5, 60);
             SELECT * FROM distlock.throttle('a.two', 5, 1, 60);
             SELECT distlock.check_rate_limit('a.' || repeat('é', 40), 5, 60);
             SELECT distlock.check_rate_limit('b.one', 5, 60);"
        ))
        .expect("keys");
        // Another database's keys are never listed.
        let other = fresh_db_on(port, &format!("rl_keys_other_{mode}"));
        connect_to(port, &other, "rl_keys").batch_execute("SELECT distlock.check_rate_limit('a.elsewhere', 5, 60)").expect("other");

        let listed: Vec<(String, String, bool, Option<i32>)> = as_role(&mut c, &monitor, |c| {
            c.query("SELECT kind, key, key_complete, request_count FROM distlock.rate_limit_keys()", &[])
                .expect("list")
                .iter()
                .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
                .collect()
        });
        let long = format!("a.{}", "é".repeat(40));
        // In memory mode a key is kept to 64 bytes, cut between characters.
        let (shown, complete) = if mode == "memory" { (format!("a.{}", "é".repeat(31)), false) } else { (long, true) };
        assert_eq!(
            listed,
            vec![
                ("window".to_string(), "a.one".to_string(), true, Some(2)),
                ("gcra".to_string(), "a.two".to_string(), true, None),
                ("window".to_string(), shown, complete, Some(1)),
            ],
            "{mode}"
        );
        refused(&mut c, &monitor, "SELECT distlock.reset_rate_limits('a.')");

        let reset: i64 = c.query_one("SELECT distlock.reset_rate_limits('a.')", &[]).expect("reset").get(0);
        assert_eq!(reset, 3, "{mode}");
        let keys: Vec<String> = c
            .query("SELECT key FROM distlock.rate_limit_keys()", &[])
            .expect("list")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(keys, vec!["b.one".to_string()], "{mode}");
        let fresh: i32 = c
            .query_one("SELECT request_count FROM distlock.rate_limit_status('a.one')", &[])
            .map(|r| r.get(0))
            .unwrap_or(0);
        assert_eq!(fresh, 0, "{mode}: a reset key starts over");
        let rest: i64 = c.query_one("SELECT distlock.reset_rate_limits()", &[]).expect("reset all").get(0);
        assert_eq!(rest, 1, "{mode}");
        connect_to(port, &other, "rl_keys").batch_execute("SELECT distlock.reset_rate_limits()").expect("other");
    }
}

/// The grant lock a lease or election name takes, as pg_locks shows it
/// while the granting transaction is open.
fn grant_lock_key(c: &mut postgres::Client, call: &str) -> u32 {
    let mut tx = c.transaction().expect("begin");
    tx.batch_execute(call).expect("grant");
    let key: u32 = tx
        .query_one(
            "SELECT objid::text::bigint FROM pg_locks
              WHERE locktype = 'advisory' AND objsubid = 25708 AND pid = pg_backend_pid()
                AND classid IN (x'646c6c73'::int::oid, x'646c656c'::int::oid)",
            &[],
        )
        .expect("one grant lock")
        .get::<_, i64>(0) as u32;
    tx.rollback().expect("rollback");
    key
}

#[test]
fn grant_locks_are_keyed_by_a_secret_of_each_database() {
    let one = fresh_db("rl_grant_keys_one");
    let two = fresh_db("rl_grant_keys_two");
    let lease = "SELECT distlock.acquire_lease('payroll', 'w', '10 s')";
    let election = "SELECT * FROM distlock.try_become_leader('payroll', 'w', '10 s')";
    let mut c1 = connect(&one);
    let key_one = grant_lock_key(&mut c1, lease);
    let key_two = grant_lock_key(&mut connect(&two), lease);
    assert_ne!(key_one, grant_key_0_3_0("payroll"), "not md5 bits anyone can match");
    assert_ne!(grant_lock_key(&mut c1, election), grant_key_0_3_0("payroll"));
    assert_ne!(key_one, key_two, "each database has its own secret");
    assert_eq!(grant_lock_key(&mut connect(&one), lease), key_one, "every backend of a database agrees");

    // A database whose extension is made again draws a new secret, and a
    // backend that had read the old one follows.
    let mut admin = connect(&one);
    admin.batch_execute("DROP EXTENSION pg_distlock; CREATE EXTENSION pg_distlock").expect("recreate");
    let fresh = grant_lock_key(&mut connect(&one), lease);
    assert_ne!(fresh, key_one);
    assert_eq!(grant_lock_key(&mut c1, lease), fresh, "the older backend reads the new secret");
}

// Breaks a fresh-eyes review of f4ce707 found, each a test that failed there.

/// A secret rewritten in place was never read again by backends that had
/// read it, so old and new backends took different grant and turn locks for
/// one name (a queue limited to 1 had 2 jobs processing). The secret is now
/// drawn once and every change is refused.
#[test]
fn the_lock_key_secret_is_never_rewritten() {
    let db = fresh_db("rl_secret_fixed");
    let mut owner = connect(&db);
    let mut old = connect(&db);
    let lease = "SELECT distlock.acquire_lease('payroll', 'w', '10 s')";
    let before = grant_lock_key(&mut old, lease);
    for change in [
        "UPDATE distlock.lock_key_secret SET secret = pg_catalog.sha256(secret)",
        "DELETE FROM distlock.lock_key_secret",
        "TRUNCATE distlock.lock_key_secret",
    ] {
        assert_eq!(sqlstate(owner.batch_execute(change)), "55000", "{change}");
    }
    assert_eq!(grant_lock_key(&mut connect(&db), lease), before, "a new backend takes the same lock");
    assert_eq!(grant_lock_key(&mut old, lease), before);
}

/// The library serves an older release's SQL until ALTER EXTENSION UPDATE
/// (preloaded: every backend from the restart to the update). On 0.3.0's SQL
/// there is no secret yet: grants and limited-queue claims work, with
/// 0.3.0's key, so that backends still on the 0.3.0 library exclude them.
#[test]
fn the_library_on_0_3_0_sql_takes_grants_with_0_3_0s_key() {
    let name = "rl_old_sql_grants";
    let mut c = fresh_db_at_version(name, "0.3.0");
    assert_eq!(
        grant_lock_key(&mut c, "SELECT distlock.acquire_lease('primary-db', 'node-a', '1 hour')"),
        grant_key_0_3_0("primary-db")
    );
    c.batch_execute("SELECT * FROM distlock.try_become_leader('scheduler', 'node-a', '1 hour')").expect("election");
    c.batch_execute("SELECT distlock.set_queue_limit('q', 2); SELECT distlock.enqueue_task('j1', '{}', now(), 0, 3, 'q')")
        .expect("limited queue");
    let claimed = c
        .query("SELECT task_id FROM distlock.consume_task('c1', '1 minute', NULL, '{q}')", &[])
        .expect("a limited queue's claim on 0.3.0's SQL");
    assert_eq!(claimed.len(), 1);
}

/// In a SQL_ASCII database (no encoding checked, most often UTF-8 text) a
/// long key was kept cut inside a UTF-8 character, which no UTF-8 client
/// could read back from rate_limit_keys().
#[test]
fn a_cut_key_in_a_sql_ascii_database_ends_between_utf8_characters() {
    let name = "rl_sql_ascii";
    let mut admin = connect("postgres");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).expect("drop");
    admin
        .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE template0 ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C'"))
        .expect("create");
    let mut c = connect(name);
    c.batch_execute("CREATE EXTENSION pg_distlock").expect("extension");
    c.batch_execute(&format!("SELECT distlock.check_rate_limit('a{}', 5, 60)", "é".repeat(40))).expect("key");
    let row = c.query_one("SELECT key::bytea, key_complete FROM distlock.rate_limit_keys()", &[]).expect("listed");
    let (kept, complete): (Vec<u8>, bool) = (row.get(0), row.get(1));
    c.batch_execute("SELECT distlock.reset_rate_limits()").expect("reset");
    assert!(!complete, "81 bytes are kept cut");
    assert_eq!(std::str::from_utf8(&kept), Ok(format!("a{}", "é".repeat(31)).as_str()));
}

