//! Where memory mode's state lives: the primary's shared memory comes from
//! preload or, on PostgreSQL 18 in this suite, from the DSM registry with
//! pg_distlock not preloaded (scripts/test_version.sh says which in
//! DISTLOCK_TEST_SHARED_MEMORY); the plain cluster stays in tables. The rest
//! of the suite then runs its memory-mode tests on whichever it is.

use crate::support::*;

fn preloaded_libraries(c: &mut Client) -> String {
    scalar(c, "SHOW shared_preload_libraries").unwrap_or_default()
}

fn allowed(c: &mut Client, key: &str) -> bool {
    c.query_one("SELECT distlock.check_rate_limit($1, 2, 60)", &[&key]).expect("check").get(0)
}

/// Two sessions share one limit of 2 calls per minute; true when no row
/// was written for it.
fn limit_is_shared_and_rowless(port: u16, db: &str) -> bool {
    let mut a = connect_to(port, db, "rate-a");
    let mut b = connect_to(port, db, "rate-b");
    assert!(allowed(&mut a, "shared"));
    assert!(allowed(&mut b, "shared"));
    assert!(!allowed(&mut a, "shared"), "the third call in the window is refused, whichever session makes it");
    count(&mut a, "SELECT 1 FROM distlock.rate_limit_windows") == 0
}

#[test]
fn the_primary_keeps_its_state_in_shared_memory_from_where_the_run_says() {
    let source = std::env::var("DISTLOCK_TEST_SHARED_MEMORY").expect("DISTLOCK_TEST_SHARED_MEMORY is not set");
    let db = fresh_db("shared_memory_source");
    let mut c = connect(&db);
    // The library's settings exist in a session once it has loaded it.
    c.batch_execute("SELECT distlock.lock('telemetry'); SELECT distlock.unlock('telemetry')").expect("lock");
    let preload = preloaded_libraries(&mut c);
    match source.as_str() {
        "preload" => assert!(preload.contains("pg_distlock"), "preloaded: {preload}"),
        "dsm" => {
            assert!(!preload.contains("pg_distlock"), "not preloaded: {preload}");
            assert_eq!(scalar(&mut c, "SHOW distlock.dynamic_shared_memory").as_deref(), Some("on"));
            // Read once, by the first backend after the start, from postgresql.conf.
            assert_eq!(scalar(&mut c, "SHOW distlock.rate_limit_capacity").as_deref(), Some("64"));
        }
        other => panic!("DISTLOCK_TEST_SHARED_MEMORY is {other}, not preload or dsm"),
    }
    assert!(limit_is_shared_and_rowless(primary_port(), &db), "memory mode writes no rate-limit row");
    assert_eq!(
        count(&mut c, "SELECT 1 FROM distlock.lock_stats WHERE key = distlock.lock_id('telemetry') AND acquisitions = 1"),
        1,
        "lock telemetry is on"
    );
}

#[test]
fn the_plain_cluster_keeps_its_state_in_tables() {
    let db = fresh_db_on(plain_port(), "shared_memory_plain");
    let mut c = connect_to(plain_port(), &db, "plain");
    assert!(!preloaded_libraries(&mut c).contains("pg_distlock"));
    assert!(!limit_is_shared_and_rowless(plain_port(), &db), "table mode keeps the window in a row");
    assert_eq!(sqlstate(c.query_one("SELECT count(*) FROM distlock.lock_stats", &[])), "55000");
}
