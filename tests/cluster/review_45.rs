//! Breaks a fresh-eyes review (review 45) found in "the install takes back
//! only from its own members" (c955ec4, sql/grants.sql), each written as a
//! test that fails there.

use crate::support::*;

/// Schema distlock is created by CREATE EXTENSION itself (control file
/// `schema = distlock`) when it does not exist, and the installing role's
/// `ALTER DEFAULT PRIVILEGES ... ON SCHEMAS` apply to it. Since c955ec4
/// grants.sql never touches the schema's grants (0f7d0d2 did), so a role
/// given CREATE on future schemas gets CREATE on distlock at a fresh install.
#[test]
fn a_fresh_install_grants_no_create_on_its_schema_by_default_privileges() {
    let mut c = empty_db("review_45_schema_create");
    ensure_role(&mut c, "review_45_app");
    c.batch_execute(
        "ALTER DEFAULT PRIVILEGES GRANT ALL ON SCHEMAS TO review_45_app; \
         CREATE EXTENSION pg_distlock",
    )
    .expect("default privileges, then the extension");
    assert_eq!(
        scalar(&mut c, "SELECT has_schema_privilege('review_45_app', 'distlock', 'CREATE')").as_deref(),
        Some("f"),
        "the installing role's default privileges gave CREATE on schema distlock"
    );
}

/// What that CREATE is worth: the role plants an overload in distlock that
/// other tenants' calls resolve to (a varchar argument, as PgJDBC's setString
/// sends, picks lock_id(varchar) over lock_id(text)) and that runs with
/// *their* rights; a one-argument try_lock(text) makes every tenant's
/// `distlock.try_lock('name')` fail with "is not unique".
#[test]
fn a_role_given_create_on_future_schemas_cannot_plant_functions_in_distlock() {
    let mut c = empty_db("review_45_schema_plant");
    ensure_role(&mut c, "review_45_app");
    ensure_role(&mut c, "review_45_tenant");
    c.batch_execute(
        "ALTER DEFAULT PRIVILEGES GRANT ALL ON SCHEMAS TO review_45_app; \
         CREATE EXTENSION pg_distlock; \
         SELECT distlock.grant_capability('review_45_tenant', 'worker')",
    )
    .expect("default privileges, extension, a worker tenant");
    let planted = c.batch_execute(
        "SET ROLE review_45_app; \
         CREATE FUNCTION distlock.lock_id(p varchar) RETURNS bigint LANGUAGE sql \
           AS 'SELECT 42::bigint /* runs as the caller */'; \
         CREATE FUNCTION distlock.try_lock(p text) RETURNS boolean LANGUAGE sql AS 'SELECT true'",
    );
    c.batch_execute("RESET ROLE").expect("reset role");
    assert!(planted.is_err(), "a role with no capability created functions in schema distlock");
    c.batch_execute("SET ROLE review_45_tenant").expect("tenant");
    let id = scalar(&mut c, "SELECT distlock.lock_id('job'::varchar)");
    let try_lock = c.batch_execute("SELECT distlock.try_lock('job')");
    c.batch_execute("RESET ROLE").expect("reset role");
    assert_ne!(id.as_deref(), Some("42"), "the tenant's lock_id call ran the planted function");
    assert!(try_lock.is_ok(), "the tenant's try_lock call failed: {:?}", try_lock.err());
}

/// The same through pg_dump / pg_restore: the dump makes schema distlock
/// itself (it is no member of the extension), so the restoring role's
/// default privileges on schemas reach it, and the restored database's
/// extension schema is writable by their grantee although the dumped one was
/// not. (Only CREATE matters here: a grant of USAGE on the schema alone
/// reaches nothing, so the install may take back CREATE from anyone but the
/// owner whoever made the schema.)
#[test]
fn a_restore_under_default_privileges_leaves_distlock_unwritable() {
    let mut source = empty_db("review_45_dump_source");
    source.batch_execute("CREATE EXTENSION pg_distlock").expect("extension");
    drop(source);
    let mut target = empty_db("review_45_dump_target");
    ensure_role(&mut target, "review_45_app");
    target
        .batch_execute("ALTER DEFAULT PRIVILEGES GRANT ALL ON SCHEMAS TO review_45_app")
        .expect("default privileges");
    let dump = format!("/tmp/review_45_{}.pgdump", std::process::id());
    pg_tool(primary_port(), "pg_dump", &["-Fc", "-f", &dump, "review_45_dump_source"]);
    pg_tool(primary_port(), "pg_restore", &["--exit-on-error", "-d", "review_45_dump_target", &dump]);
    let _ = std::fs::remove_file(&dump);
    assert_eq!(
        scalar(&mut target, "SELECT has_schema_privilege('review_45_app', 'distlock', 'CREATE')").as_deref(),
        Some("f"),
        "after pg_restore a role given CREATE on future schemas may create objects in distlock"
    );
}
