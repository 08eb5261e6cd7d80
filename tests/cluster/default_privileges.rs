//! An installing role's ALTER DEFAULT PRIVILEGES reach nothing of
//! pg_distlock's: CREATE EXTENSION and the update to 0.4.0 leave what they
//! create granted to its owner alone (grants.sql, the update script), so an
//! application role given EXECUTE on future functions and SELECT on future
//! tables may not claim jobs unscoped, purge a queue or read the lock-key
//! secret. Each test failed before (confirmed by hand and by review 41).

use crate::support::*;

const ROLE: &str = "default_privileges_app";

/// A database `name` whose installing role grants every future table,
/// sequence and function (and schema) to ROLE, then `create_extension` run.
fn database_with_default_privileges(name: &str, create_extension: &str) -> postgres::Client {
    let mut c = empty_db(name);
    ensure_role(&mut c, ROLE);
    c.batch_execute(&format!(
        "ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO {ROLE}; \
         ALTER DEFAULT PRIVILEGES GRANT USAGE ON SEQUENCES TO {ROLE}; \
         ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO {ROLE}; \
         ALTER DEFAULT PRIVILEGES GRANT USAGE ON SCHEMAS TO {ROLE}; \
         {create_extension}"
    ))
    .expect("default privileges, then the extension");
    c
}

/// What ROLE may do with pg_distlock's objects: each privilege it holds.
fn granted_to_the_role(c: &mut postgres::Client) -> Vec<String> {
    c.query(
        &format!(
            "SELECT 'function ' || p.oid::regprocedure::text FROM pg_proc p
              WHERE p.pronamespace = 'distlock'::regnamespace AND has_function_privilege('{ROLE}', p.oid, 'EXECUTE')
             UNION ALL
             SELECT 'relation ' || c.oid::regclass::text FROM pg_class c
              WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind IN ('r', 'v', 'S')
                AND (has_table_privilege('{ROLE}', c.oid, 'SELECT') OR
                     (c.relkind = 'S' AND has_sequence_privilege('{ROLE}', c.oid, 'USAGE')))
             UNION ALL
             SELECT 'schema distlock' WHERE has_schema_privilege('{ROLE}', 'distlock', 'USAGE')
             ORDER BY 1"
        ),
        &[],
    )
    .expect("privileges")
    .iter()
    .map(|row| row.get(0))
    .collect()
}

#[test]
fn an_install_grants_nothing_through_the_installers_default_privileges() {
    let mut c = database_with_default_privileges("default_privileges_install", "CREATE EXTENSION pg_distlock");
    // The schema is left as it is: it is no member of the extension (DROP
    // EXTENSION leaves it, with what a DBA granted on it: review 44b), and
    // its USAGE alone reaches nothing.
    let granted: Vec<String> = granted_to_the_role(&mut c).into_iter().filter(|g| g != "schema distlock").collect();
    assert_eq!(granted, Vec::<String>::new());
    // pg_distlock's own grants stand.
    assert_eq!(
        scalar(&mut c, "SELECT has_table_privilege('pg_monitor', 'distlock.running_tasks', 'SELECT')").as_deref(),
        Some("t")
    );
}

#[test]
fn the_update_to_0_4_0_grants_nothing_new_through_the_owners_default_privileges() {
    let mut c = database_with_default_privileges(
        "default_privileges_update",
        "CREATE EXTENSION pg_distlock VERSION '0.3.0'",
    );
    let before = granted_to_the_role(&mut c);
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update");
    let after = granted_to_the_role(&mut c);
    // enqueue_task and enqueue_tasks get a parameter more (p_group): the
    // update carries what 0.3.0's had over to them, no more (their grants
    // are tested in upgrade.rs); so a function counts by its name there.
    let name_of = |granted: &String| granted.split('(').next().unwrap_or_default().to_string();
    let reshaped = ["function distlock.enqueue_task", "function distlock.enqueue_tasks"];
    let new: Vec<&String> = after
        .iter()
        .filter(|granted| !before.contains(granted))
        .filter(|granted| {
            !(reshaped.contains(&name_of(granted).as_str()) && before.iter().any(|b| name_of(b) == name_of(granted)))
        })
        .collect();
    assert!(new.is_empty(), "the update granted {new:?} to {ROLE}");
    assert_eq!(
        scalar(&mut c, "SELECT has_function_privilege('pg_monitor', 'distlock.rate_limit_keys()', 'EXECUTE')").as_deref(),
        Some("t")
    );
    assert_eq!(
        scalar(&mut c, "SELECT has_function_privilege('pg_monitor', 'distlock.queue_counters()', 'EXECUTE')").as_deref(),
        Some("t")
    );
}
