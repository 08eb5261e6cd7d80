//! Connections, fresh databases and deadline-bounded polling.

use std::time::{Duration, Instant};

pub use postgres::{Client, NoTls};

fn env_port(name: &str) -> u16 {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run these tests through scripts/test.sh"))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a port number"))
}

pub fn primary_port() -> u16 {
    env_port("DISTLOCK_TEST_PORT")
}

pub fn standby_port() -> u16 {
    env_port("DISTLOCK_TEST_STANDBY_PORT")
}

/// A cluster without pg_distlock preloaded (and on 17+ with
/// distlock.dynamic_shared_memory off): everything runs in table mode.
pub fn plain_port() -> u16 {
    env_port("DISTLOCK_TEST_PLAIN_PORT")
}

/// (mode name, port): the primary (shared memory) and the plain cluster (tables).
pub fn storage_modes() -> [(&'static str, u16); 2] {
    [("memory", primary_port()), ("table", plain_port())]
}

/// PgBouncer in transaction-pooling mode in front of the primary (4 server
/// connections per database). Only the simple query protocol works through
/// it: named prepared statements would land on other server connections.
pub fn pooler_port() -> u16 {
    env_port("DISTLOCK_TEST_POOLER_PORT")
}

/// The first column of the first row of a simple-protocol query.
pub fn scalar(client: &mut Client, sql: &str) -> Option<String> {
    client
        .simple_query(sql)
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .find_map(|m| match m {
            postgres::SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_string)),
            _ => None,
        })
        .flatten()
}

pub fn pgdata() -> String {
    std::env::var("DISTLOCK_TEST_PGDATA").expect("DISTLOCK_TEST_PGDATA is not set")
}

pub fn connect_to(port: u16, db: &str, application_name: &str) -> Client {
    let url = format!(
        "host=127.0.0.1 port={port} user=postgres dbname={db} application_name={application_name}"
    );
    Client::connect(&url, NoTls).unwrap_or_else(|e| panic!("connect to {db} on {port}: {e}"))
}

pub fn connect(db: &str) -> Client {
    connect_to(primary_port(), db, "cluster-test")
}

/// A new database with pg_distlock created in it.
pub fn fresh_db(name: &str) -> String {
    fresh_db_on(primary_port(), name)
}

pub fn fresh_db_on(port: u16, name: &str) -> String {
    fresh_db_with(port, name, "CREATE EXTENSION pg_distlock")
}

/// A new database on the primary with pg_distlock created at an older
/// release's SQL (`version`), which this library serves until the update;
/// connected.
pub fn fresh_db_at_version(name: &str, version: &str) -> Client {
    fresh_db_with(primary_port(), name, &format!("CREATE EXTENSION pg_distlock VERSION '{version}'"));
    connect(name)
}

fn fresh_db_with(port: u16, name: &str, create_extension: &str) -> String {
    empty_db_on(port, name).batch_execute(create_extension).expect("create extension");
    name.to_string()
}

/// A new database on the primary without pg_distlock (a test creates it,
/// after settings of its own); connected.
pub fn empty_db(name: &str) -> Client {
    empty_db_on(primary_port(), name)
}

fn empty_db_on(port: u16, name: &str) -> Client {
    drop_earlier_tests_databases();
    let mut admin = connect_to(port, "postgres", "cluster-test");
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).expect("drop");
    admin.batch_execute(&format!("CREATE DATABASE {name}")).expect("create database");
    remember_made_database(port, name);
    connect_to(port, name, "cluster-test")
}

/// The databases this process made, with the test that made them: a run makes
/// ~150, and kept they filled the disk of a CI machine (2.5 GB a cluster, and
/// the standby's copy). The test that made them may still be reading them, so
/// they are dropped when a later test asks for a database.
static MADE_DATABASES: std::sync::Mutex<Vec<(String, u16, String)>> = std::sync::Mutex::new(Vec::new());

fn drop_earlier_tests_databases() {
    // libtest names each test's thread after the test (a thread the test
    // spawned has none: it drops nothing).
    let Some(test) = std::thread::current().name().map(str::to_string) else { return };
    let mut made = MADE_DATABASES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let (earlier, own): (Vec<_>, Vec<_>) = made.drain(..).partition(|(maker, _, _)| *maker != test);
    *made = own;
    drop(made);
    for (_, port, name) in earlier {
        // Best effort: the cluster may be down, or a prepared transaction of
        // the earlier test may hold the database; then it stays.
        let url = format!("host=127.0.0.1 port={port} user=postgres dbname=postgres connect_timeout=5");
        if let Ok(mut admin) = Client::connect(&url, NoTls) {
            let _ = admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"));
        }
    }
}

fn remember_made_database(port: u16, name: &str) {
    // One a test's own thread made is left: its test is not known.
    let Some(test) = std::thread::current().name().map(str::to_string) else { return };
    MADE_DATABASES.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push((test, port, name.to_string()));
}

/// Role `role`, made unless it exists (roles are cluster-wide: earlier runs
/// and other tests' databases share them).
pub fn ensure_role(c: &mut Client, role: &str) {
    c.batch_execute(&format!("DO $$ BEGIN CREATE ROLE {role}; EXCEPTION WHEN duplicate_object THEN NULL; END $$"))
        .expect("role");
}

/// Polls `check` until it is true, failing after `timeout`.
pub fn eventually(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `fetch` (its first column a fencing token, NULL while nothing can
/// be claimed) until it claims, failing after `timeout`; returns the token.
pub fn eventually_claimed(client: &mut Client, what: &str, timeout: Duration, fetch: &str) -> i64 {
    let mut token: Option<i64> = None;
    eventually(what, timeout, || {
        token = client.query_one(fetch, &[]).unwrap_or_else(|e| panic!("{fetch}: {e}")).get(0);
        token.is_some()
    });
    token.unwrap_or_else(|| panic!("{what}: no token"))
}

pub fn backend_pid(client: &mut Client) -> i32 {
    client.query_one("SELECT pg_backend_pid()", &[]).expect("pid").get(0)
}

pub fn count(client: &mut Client, sql: &str) -> i64 {
    client
        .query_one(&format!("SELECT count(*) FROM ({sql}) q"), &[])
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

/// The SQLSTATE of a failed statement.
pub fn sqlstate(result: Result<impl Sized, postgres::Error>) -> String {
    match result {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.code().map(|c| c.code().to_string()).unwrap_or_else(|| format!("no SQLSTATE: {e}")),
    }
}

/// A connection to `db` on `port`, retried while the server is restarting.
pub fn connect_when_up(port: u16, db: &str, application_name: &str) -> Client {
    let url = format!("host=127.0.0.1 port={port} user=postgres dbname={db} application_name={application_name}");
    let mut client = None;
    eventually("the server to accept connections", Duration::from_secs(60), || {
        client = Client::connect(&url, NoTls).ok();
        client.is_some()
    });
    client.expect("connected")
}

/// The PostgreSQL major version these tests were built for (its Cargo feature).
pub const PG_MAJOR: u32 = if cfg!(feature = "pg18") {
    18
} else if cfg!(feature = "pg17") {
    17
} else {
    15
};

/// A program of that version's PostgreSQL (pg_ctl, psql, pg_dump, pg_config).
/// A server program, of PGBIN when set (a private installation, as
/// scripts/cluster.sh takes it) or else of the system's.
pub fn pg_bin(program: &str) -> String {
    match std::env::var("PGBIN") {
        Ok(dir) if !dir.is_empty() => format!("{dir}/{program}"),
        _ => format!("/usr/lib/postgresql/{PG_MAJOR}/bin/{program}"),
    }
}

/// Crashes and restarts the primary (pg_ctl -m immediate), then connects to `db` again.
pub fn crash_restart_primary(db: &str) -> Client {
    let status = std::process::Command::new("runuser")
        .args(["-u", "postgres", "--", &pg_bin("pg_ctl"), "-D"])
        .arg(pgdata())
        .args(["-m", "immediate", "-w", "-t", "60", "restart"])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("pg_ctl");
    assert!(status.success(), "restart failed");
    let mut client = None;
    eventually("the server to accept connections", Duration::from_secs(30), || {
        let url = format!("host=127.0.0.1 port={} user=postgres dbname={db}", primary_port());
        client = Client::connect(&url, NoTls).ok();
        client.is_some()
    });
    client.expect("connected")
}

/// Runs a PostgreSQL client program (pg_dump, pg_restore) against `port`.
pub fn pg_tool(port: u16, tool: &str, args: &[&str]) {
    let status = std::process::Command::new(pg_bin(tool))
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .args(args)
        .status()
        .unwrap_or_else(|e| panic!("{tool}: {e}"));
    assert!(status.success(), "{tool} {args:?} failed");
}

/// The memory-mode mark of `worker_id` in the primary's marks file
/// (pg_distlock/snowflake_marks: one little-endian int64 per worker id), 0
/// when none was written.
pub fn persisted_snowflake_mark(worker_id: i64) -> i64 {
    let bytes = std::fs::read(format!("{}/pg_distlock/snowflake_marks", pgdata())).unwrap_or_default();
    let at = (worker_id * 8) as usize;
    bytes.get(at..at + 8).map_or(0, |b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// Runs `work` with the session's role set to `role`.
pub fn as_role<T>(c: &mut Client, role: &str, work: impl FnOnce(&mut Client) -> T) -> T {
    c.batch_execute(&format!("SET ROLE {role}")).expect("set role");
    let result = work(c);
    c.batch_execute("RESET ROLE").expect("reset role");
    result
}

/// An error with its SQLSTATE and message.
pub fn described(e: postgres::Error) -> String {
    e.as_db_error().map_or_else(|| e.to_string(), |d| format!("{}: {}", d.code().code(), d.message()))
}

/// A database at 0.3.0 with a role given `capability` and then dropped the
/// way PostgreSQL drops a role with privileges (DROP OWNED, DROP ROLE),
/// without revoke_capability, so that its row stays in role_capabilities
/// with the dropped role's oid; the update to 0.4.0 must go through.
pub fn update_goes_through_with_a_dropped_role(name: &str, capability: &str) {
    let mut c = fresh_db_at_version(name, "0.3.0");
    c.batch_execute(&format!(
        "DROP ROLE IF EXISTS review_41_gone; CREATE ROLE review_41_gone; \
         SELECT distlock.grant_capability('review_41_gone', '{capability}', 'acme:'); \
         DROP OWNED BY review_41_gone; DROP ROLE review_41_gone;"
    ))
    .expect("a role with a capability, dropped");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.role_capabilities"), 1, "the dropped role's row stays");
    let updated = c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").map_err(described);
    assert!(updated.is_ok(), "the update fails: {updated:?}");
}

/// Runs `sql` as `role` and expects 42501.
pub fn refused(c: &mut Client, role: &str, sql: &str) {
    let result = as_role(c, role, |c| c.simple_query(sql));
    assert_eq!(sqlstate(result), "42501", "{role}: {sql} must be refused");
}

/// A connection to database `db` on the standby once `count_sql` (a count)
/// reads 1 there. The database can show up before what the primary did in
/// it is replayed: until then the query fails or counts 0, "not yet".
pub fn standby_showing(db: &str, what: &str, count_sql: &str) -> Client {
    let mut standby = None;
    eventually(what, Duration::from_secs(30), || {
        standby = Client::connect(&format!("host=127.0.0.1 port={} user=postgres dbname={db}", standby_port()), NoTls).ok();
        standby
            .as_mut()
            .is_some_and(|c| c.query_one(count_sql, &[]).is_ok_and(|row| row.get::<_, i64>(0) == 1))
    });
    standby.expect("standby")
}
