//! The catalog lint: what a fresh or an updated install grants, to whom.

use crate::support::*;

/// Functions PUBLIC may execute: pure, read-only helpers. Empty for now:
/// every function is granted per role.
const PUBLIC_FUNCTIONS: &[&str] = &[];

fn rows(c: &mut Client, sql: &str) -> Vec<String> {
    c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| r.get(0)).collect()
}

fn lint(c: &mut Client, install: &str) {
    let public_functions = rows(
        c,
        "SELECT p.oid::regprocedure::text FROM pg_proc p \
          WHERE p.pronamespace = 'distlock'::regnamespace \
            AND has_function_privilege('public', p.oid, 'EXECUTE') ORDER BY 1",
    );
    let unexpected: Vec<_> = public_functions.iter().filter(|f| !PUBLIC_FUNCTIONS.contains(&f.as_str())).collect();
    assert!(unexpected.is_empty(), "{install}: functions executable by PUBLIC: {unexpected:?}");

    let unpinned_definers = rows(
        c,
        "SELECT p.oid::regprocedure::text FROM pg_proc p \
          WHERE p.pronamespace = 'distlock'::regnamespace AND p.prosecdef \
            AND NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) s WHERE s LIKE 'search\\_path=%') ORDER BY 1",
    );
    assert!(unpinned_definers.is_empty(), "{install}: SECURITY DEFINER without a pinned search_path: {unpinned_definers:?}");

    let writable = rows(
        c,
        "SELECT c.oid::regclass::text || ' ' || a.privilege_type || ' to ' || \
                CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END \
           FROM pg_class c, aclexplode(c.relacl) a \
          WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind IN ('r', 'p') \
            AND a.grantee <> c.relowner \
            AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE') ORDER BY 1",
    );
    assert!(writable.is_empty(), "{install}: tables writable by roles other than the owner: {writable:?}");

    let sequences = rows(
        c,
        "SELECT c.oid::regclass::text || ' ' || a.privilege_type || ' to ' || \
                CASE a.grantee WHEN 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END \
           FROM pg_class c, aclexplode(c.relacl) a \
          WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind = 'S' \
            AND a.grantee <> c.relowner ORDER BY 1",
    );
    assert!(sequences.is_empty(), "{install}: sequences usable by roles other than the owner: {sequences:?}");

    let public_relations = rows(
        c,
        "SELECT c.oid::regclass::text FROM pg_class c \
          WHERE c.relnamespace = 'distlock'::regnamespace \
            AND EXISTS (SELECT 1 FROM aclexplode(c.relacl) a WHERE a.grantee = 0) ORDER BY 1",
    );
    assert!(public_relations.is_empty(), "{install}: relations with PUBLIC privileges: {public_relations:?}");
}

#[test]
fn fresh_and_updated_installs_grant_nothing_to_public_and_no_table_writes_to_anyone() {
    let port = plain_port();
    let fresh = fresh_db_on(port, "privileges_fresh");
    lint(&mut connect_to(port, &fresh, "lint"), "fresh install");

    let mut admin = connect_to(port, "postgres", "lint");
    admin.batch_execute("DROP DATABASE IF EXISTS privileges_updated WITH (FORCE)").expect("drop");
    admin.batch_execute("CREATE DATABASE privileges_updated").expect("create");
    let mut updated = connect_to(port, "privileges_updated", "lint");
    updated
        .batch_execute("CREATE EXTENSION pg_distlock VERSION '0.1.0'; ALTER EXTENSION pg_distlock UPDATE")
        .expect("install 0.1.0 and update");
    lint(&mut updated, "updated from 0.1.0");
}
