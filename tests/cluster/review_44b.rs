//! Breaks a fresh-eyes review found in "CREATE EXTENSION and the update to
//! 0.4.0 take back the installer's ALTER DEFAULT PRIVILEGES" (uncommitted on
//! 31790d2, sql/grants.sql and the update's $owner_only$ block), each
//! written as a test that fails there.

use crate::support::*;

/// The update's hard-coded list misses distlock.library_guard(), which the
/// update creates after its $owner_only$ block: the owner's default
/// privileges grant it to their grantee, which a fresh install takes back.
#[test]
fn the_update_takes_back_default_privileges_on_library_guard_too() {
    let mut c = empty_db("review_44b_guard");
    ensure_role(&mut c, "review_44b_app");
    c.batch_execute(
        "ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO review_44b_app; \
         CREATE EXTENSION pg_distlock VERSION '0.3.0'; \
         ALTER EXTENSION pg_distlock UPDATE",
    )
    .expect("0.3.0, then the update");
    assert_eq!(
        scalar(&mut c, "SELECT has_function_privilege('review_44b_app', 'distlock.library_guard()', 'EXECUTE')")
            .as_deref(),
        Some("f"),
        "the update granted library_guard() through the owner's default privileges"
    );
}

/// The update keeps pg_monitor's default-privilege grant on its three
/// monitor functions as it is, grant option included; a fresh install takes
/// it back and grants plain EXECUTE. A member of pg_monitor may then grant
/// them on, to anyone.
#[test]
fn the_update_keeps_no_grant_option_of_pg_monitor_on_the_monitor_functions() {
    let mut c = empty_db("review_44b_monitor_option");
    c.batch_execute(
        "ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO pg_monitor WITH GRANT OPTION; \
         CREATE EXTENSION pg_distlock VERSION '0.3.0'; \
         ALTER EXTENSION pg_distlock UPDATE",
    )
    .expect("0.3.0, then the update");
    for f in [
        "distlock.rate_limit_keys()",
        "distlock.lease_backend_connected(integer)",
        "distlock.lease_backend_alive(integer)",
        "distlock.queue_counters()",
    ] {
        assert_eq!(
            scalar(&mut c, &format!("SELECT has_function_privilege('pg_monitor', '{f}', 'EXECUTE WITH GRANT OPTION')"))
                .as_deref(),
            Some("f"),
            "pg_monitor may grant {f} on"
        );
    }
}

/// Schema distlock is left behind by DROP EXTENSION (it is no member) and
/// made before CREATE EXTENSION by pg_restore and by a DBA setting ALTER
/// DEFAULT PRIVILEGES IN SCHEMA distlock. A grant on it passed on by a role
/// holding the grant option makes grants.sql's REVOKE ALL ... FROM that
/// role, without CASCADE, fail with 2BP01, and CREATE EXTENSION with it (a
/// reinstall went through before the change).
#[test]
fn create_extension_goes_through_when_a_grantee_passed_its_grant_on() {
    let mut c = empty_db("review_44b_chain");
    ensure_role(&mut c, "review_44b_lead");
    ensure_role(&mut c, "review_44b_member");
    c.batch_execute(
        "CREATE EXTENSION pg_distlock; \
         GRANT USAGE ON SCHEMA distlock TO review_44b_lead WITH GRANT OPTION; \
         SET ROLE review_44b_lead; GRANT USAGE ON SCHEMA distlock TO review_44b_member; RESET ROLE; \
         DROP EXTENSION pg_distlock",
    )
    .expect("extension, grant chain on its schema, dropped");
    let result = c.batch_execute("CREATE EXTENSION pg_distlock");
    assert!(
        result.is_ok(),
        "reinstall failed: {:?}",
        result.err().map(|e| format!("{:?} {}", e.code(), e.as_db_error().map(|d| d.message()).unwrap_or("")))
    );
}

/// Schema distlock made before CREATE EXTENSION holds a table of the
/// user's, granted to a role: grants.sql walks every object of the schema,
/// not pg_distlock's, and takes the user's grant back.
#[test]
fn create_extension_leaves_grants_on_objects_not_its_own_alone() {
    let mut c = empty_db("review_44b_foreign");
    ensure_role(&mut c, "review_44b_reader");
    c.batch_execute(
        "CREATE SCHEMA distlock; CREATE TABLE distlock.users_own (x int); \
         GRANT SELECT ON distlock.users_own TO review_44b_reader; \
         CREATE EXTENSION pg_distlock",
    )
    .expect("schema, table, extension");
    assert_eq!(
        scalar(&mut c, "SELECT has_table_privilege('review_44b_reader', 'distlock.users_own', 'SELECT')").as_deref(),
        Some("t"),
        "CREATE EXTENSION revoked a grant on a table that is not pg_distlock's"
    );
}
