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
    // A worker role granted what 0.1.0's README asked for keeps none of the
    // table writes or sequence use after the update.
    updated
        .batch_execute(
            "CREATE EXTENSION pg_distlock VERSION '0.1.0'; \
             DROP ROLE IF EXISTS distlock_old_worker; CREATE ROLE distlock_old_worker; \
             GRANT SELECT, UPDATE ON distlock.scheduled_tasks TO distlock_old_worker; \
             GRANT SELECT, INSERT, UPDATE ON distlock.task_execution_log TO distlock_old_worker; \
             GRANT USAGE ON SEQUENCE distlock.fencing_token_seq, distlock.task_execution_log_id_seq \
               TO distlock_old_worker; \
             GRANT INSERT, UPDATE, DELETE ON distlock.lease_state TO PUBLIC; \
             ALTER EXTENSION pg_distlock UPDATE",
        )
        .expect("install 0.1.0, grant as its README did, and update");
    lint(&mut updated, "updated from 0.1.0");
}

/// Roles are cluster-wide: each test makes its own, after dropping the
/// database that held its grants from an earlier run.
fn fresh_roles(c: &mut Client, roles: &[&str]) {
    for role in roles {
        c.batch_execute(&format!("DROP ROLE IF EXISTS {role}; CREATE ROLE {role}")).expect("role");
    }
}

/// Every row of every distlock table, as text: what must not change.
fn snapshot(c: &mut Client) -> Vec<String> {
    let tables = rows(
        c,
        "SELECT c.oid::regclass::text FROM pg_class c \
          WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind = 'r' ORDER BY 1",
    );
    tables
        .iter()
        .flat_map(|table| {
            rows(c, &format!("SELECT '{table} ' || t::text FROM {table} t ORDER BY t::text"))
        })
        .collect()
}

/// A role with only the worker, producer and consumer capabilities does all
/// its work through the functions, can write no table and use no sequence
/// directly, and cannot end, renew or read another role's holds; an admin can.
#[test]
fn capabilities_are_enough_and_holds_belong_to_the_role_that_took_them() {
    let port = plain_port();
    let db = fresh_db_on(port, "privileges_roles");
    let mut c = connect_to(port, &db, "privileges");
    fresh_roles(&mut c, &["distlock_app_a", "distlock_app_b", "distlock_ops", "distlock_watch"]);
    c.batch_execute(
        "SELECT distlock.grant_capability(r, cap) \
           FROM unnest(ARRAY['distlock_app_a', 'distlock_app_b']::regrole[]) r, \
                unnest(ARRAY['worker', 'producer', 'consumer']) cap; \
         SELECT distlock.grant_capability('distlock_ops', 'admin'); \
         SELECT distlock.grant_capability('distlock_watch', 'monitor'); \
         INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
         VALUES ('report', 'etl', '@hourly', now()), ('spare', 'etl', NULL, now()), ('leased', 'etl', NULL, now());",
    )
    .expect("capabilities and tasks");

    // A's day of work, through the functions alone.
    for sql in [
        "SELECT task_name FROM distlock.worker_fetch_and_execute_task('a1')",
        "SELECT distlock.release_task_lock(1, 'a1', 'completed')",
        "SELECT distlock.acquire_lease('shared-lease', 'node', '1 hour')",
        "SELECT distlock.renew_lease('shared-lease', 'node', '1 hour')",
        "SELECT distlock.acquire_semaphore('pool', 2, 'node', '1 hour')",
        "SELECT is_leader FROM distlock.try_become_leader('group', 'node', '1 hour')",
        "SELECT distlock.check_rate_limit('api', 5, 60)",
        "SELECT allowed FROM distlock.throttle('api', 5, 1, 1)",
        "SELECT distlock.generate_snowflake_id(3)",
        "SELECT distlock.lock('orders:1')",
        "SELECT distlock.unlock('orders:1')",
        "SELECT distlock.enqueue_task('mail', '{\"to\": 1}')",
        "SELECT distlock.enqueue_task('mail', '{\"to\": 2}')",
        "SELECT task_id FROM distlock.consume_task('a-consumer', '1 hour')",
    ] {
        let result = as_role(&mut c, "distlock_app_a", |c| scalar(c, sql));
        assert!(result.is_some_and(|v| v != "f"), "distlock_app_a: {sql}");
    }
    let job = rows(&mut c, "SELECT id::text FROM distlock.task_queue WHERE status = 'processing'").concat();
    // The claim A keeps running, to be refused to B below.
    as_role(&mut c, "distlock_app_a", |c| scalar(c, "SELECT distlock.try_acquire_task_lock(2, 'a1')"));
    // And a lease-mode claim, renewed and released by token from anywhere.
    let lease_token = as_role(&mut c, "distlock_app_a", |c| {
        scalar(c, "SELECT distlock.try_acquire_task_lease(3, 'a1', '1 hour')")
    })
    .expect("lease-mode claim");

    let before = snapshot(&mut c);
    let tables = rows(
        &mut c,
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind = 'r'",
    );
    assert!(tables.len() >= 12, "{tables:?}");
    for table in &tables {
        let column = if table.ends_with("scheduled_tasks") {
            "current_token".to_string()
        } else {
            rows(&mut c, &format!("SELECT attname::text FROM pg_attribute WHERE attrelid = '{table}'::regclass AND attnum = 1")).concat()
        };
        for sql in [
            format!("SELECT * FROM {table}"),
            format!("INSERT INTO {table} DEFAULT VALUES"),
            format!("UPDATE {table} SET {column} = {column}"),
            format!("DELETE FROM {table}"),
            format!("TRUNCATE {table}"),
        ] {
            refused(&mut c, "distlock_app_a", &sql);
        }
    }
    for sequence in rows(
        &mut c,
        "SELECT c.oid::regclass::text FROM pg_class c WHERE c.relnamespace = 'distlock'::regnamespace AND c.relkind = 'S'",
    ) {
        refused(&mut c, "distlock_app_a", &format!("SELECT nextval('{sequence}')"));
        refused(&mut c, "distlock_app_a", &format!("SELECT setval('{sequence}', 1)"));
    }
    // B names A's owner strings: every act on A's holds is refused.
    for sql in [
        "SELECT distlock.release_lease('shared-lease', 'node')".to_string(),
        "SELECT distlock.renew_lease('shared-lease', 'node', '1 hour')".to_string(),
        "SELECT distlock.release_semaphore('pool', 'node')".to_string(),
        "SELECT distlock.resign_leader('group', 'node')".to_string(),
        format!("SELECT distlock.complete_task({job}, 'a-consumer')"),
        format!("SELECT distlock.fail_task({job}, 'forged', 'a-consumer')"),
        format!("SELECT distlock.extend_task_lease({job}, '1 hour', 'a-consumer')"),
        format!("SELECT distlock.complete_task({job}, 'a-consumer', 1)"),
        format!("SELECT distlock.renew_task_lease(3, {lease_token}, '1 hour')"),
        format!("SELECT distlock.release_task_lease(3, {lease_token}, 'completed')"),
        "SELECT distlock.force_release_lease('shared-lease')".to_string(),
        "SELECT * FROM distlock.check_and_recover_timeout_tasks()".to_string(),
        "SELECT distlock.prune_leases('0 s')".to_string(),
        "SELECT * FROM distlock.leases".to_string(),
    ] {
        refused(&mut c, "distlock_app_b", &sql);
    }
    // The same session, now B: A's claim is A's.
    refused(&mut c, "distlock_app_b", "SELECT distlock.release_task_lock(2, 'a1', 'completed')");
    // Taking with A's owner string gets nothing while A holds it.
    for sql in [
        "SELECT distlock.acquire_lease('shared-lease', 'node', '1 hour') IS NULL",
        "SELECT NOT distlock.acquire_semaphore('pool', 2, 'node', '1 hour')",
        "SELECT NOT is_leader FROM distlock.try_become_leader('group', 'node', '1 hour')",
    ] {
        assert_eq!(as_role(&mut c, "distlock_app_b", |c| scalar(c, sql)).as_deref(), Some("t"), "{sql}");
    }
    assert_eq!(snapshot(&mut c), before, "refused calls changed nothing");

    // A monitor reads the views and can take nothing.
    as_role(&mut c, "distlock_watch", |c| scalar(c, "SELECT count(*) FROM distlock.leases"));
    refused(&mut c, "distlock_watch", "SELECT distlock.acquire_lease('x', 'y', '1 hour')");
    // The queue counters: read by monitors and admins, reset by admins alone.
    for (role, function, may) in [
        ("distlock_watch", "distlock.queue_counters()", "t"),
        ("distlock_watch", "distlock.reset_queue_counters(text)", "f"),
        ("distlock_app_a", "distlock.queue_counters()", "f"),
        ("distlock_ops", "distlock.queue_counters()", "t"),
        ("distlock_ops", "distlock.reset_queue_counters(text)", "t"),
    ] {
        let sql = format!("SELECT has_function_privilege('{role}', '{function}', 'EXECUTE')");
        assert_eq!(scalar(&mut c, &sql).as_deref(), Some(may), "{role}: {function}");
    }
    // An admin acts on any role's holds.
    for sql in [
        "SELECT distlock.release_lease('shared-lease', 'node')".to_string(),
        format!("SELECT distlock.complete_task({job}, 'a-consumer')"),
        "SELECT distlock.resign_leader('group', 'node')".to_string(),
        format!("SELECT 't' FROM distlock.release_task_lease(3, {lease_token}, 'completed')"),
    ] {
        assert_eq!(as_role(&mut c, "distlock_ops", |c| scalar(c, &sql)).as_deref(), Some("t"), "admin: {sql}");
    }
    // An unknown capability is refused by grant and revoke alike, and
    // revoking it takes nothing away.
    for sql in [
        "SELECT distlock.grant_capability('distlock_app_a', 'superpowers')",
        "SELECT distlock.revoke_capability('distlock_app_a', 'superpowers')",
    ] {
        assert_eq!(sqlstate(c.simple_query(sql)), "22023", "{sql}");
    }
    assert_eq!(scalar(&mut c, "SELECT has_schema_privilege('distlock_app_a', 'distlock', 'USAGE')").as_deref(), Some("t"));
    // And A still settles its own.
    let own = "SELECT distlock.release_task_lock(2, 'a1', 'completed')";
    as_role(&mut c, "distlock_app_a", |c| scalar(c, own));
    assert_eq!(
        as_role(&mut c, "distlock_app_a", |c| scalar(c, "SELECT distlock.release_semaphore('pool', 'node')")).as_deref(),
        Some("t")
    );
}

/// A hostile role plants look-alikes of what pg_distlock's statements use
/// (functions, operators, a type, tables) in `public` and `pg_temp`, puts
/// them first in its search_path and calls every function it may: no plant
/// runs, and the results are right.
#[test]
fn look_alike_objects_on_the_callers_search_path_are_never_used() {
    let port = plain_port();
    let db = fresh_db_on(port, "privileges_hostile");
    let mut c = connect_to(port, &db, "privileges");
    fresh_roles(&mut c, &["distlock_hostile"]);
    c.batch_execute(
        "SELECT distlock.grant_capability('distlock_hostile', cap) \
           FROM unnest(ARRAY['worker', 'producer', 'consumer']) cap; \
         GRANT CREATE ON SCHEMA public TO distlock_hostile; \
         CREATE TABLE public.side_effects (what text); \
         GRANT INSERT, SELECT ON public.side_effects TO PUBLIC; \
         INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
         VALUES ('report', 'etl', '@hourly', now());",
    )
    .expect("setup");
    c.batch_execute("SET ROLE distlock_hostile").expect("hostile");
    let mut plants = String::new();
    for (name, args, returns, value) in [
        ("now", "", "timestamptz", "'2000-01-01'::timestamptz"),
        ("clock_timestamp", "", "timestamptz", "'2000-01-01'::timestamptz"),
        ("nextval", "regclass", "bigint", "1"),
        ("pg_backend_pid", "", "int", "1"),
        ("random", "", "float8", "0"),
        ("power", "float8, float8", "float8", "0"),
        ("count", "text", "bigint", "0"),
        ("btrim", "text", "text", "'x'"),
        ("pg_try_advisory_lock", "bigint", "boolean", "true"),
        ("pg_advisory_unlock", "bigint", "boolean", "true"),
        ("pg_try_advisory_xact_lock", "bigint", "boolean", "true"),
        ("cron_next", "text, timestamptz", "timestamptz", "'2000-01-01'::timestamptz"),
    ] {
        let call_args = if args.is_empty() { String::new() } else { args.to_string() };
        plants.push_str(&format!(
            "CREATE FUNCTION public.{name}({call_args}) RETURNS {returns} LANGUAGE sql AS \
             $$ INSERT INTO public.side_effects VALUES ('{name}'); SELECT {value} $$;"
        ));
    }
    for (op, left, right) in [
        ("=", "text", "text"),
        ("=", "bigint", "bigint"),
        ("=", "integer", "integer"),
        ("<=", "timestamptz", "timestamptz"),
        (">", "timestamptz", "timestamptz"),
        ("<", "bigint", "bigint"),
    ] {
        let function = format!("plant_{}_{}", left, op.replace('=', "eq").replace('<', "lt").replace('>', "gt"));
        plants.push_str(&format!(
            "CREATE FUNCTION public.{function}({left}, {right}) RETURNS boolean LANGUAGE sql AS \
             $$ INSERT INTO public.side_effects VALUES ('operator {op}'); SELECT true $$; \
             CREATE OPERATOR public.{op} (LEFTARG = {left}, RIGHTARG = {right}, FUNCTION = public.{function});"
        ));
    }
    plants.push_str(
        "CREATE OPERATOR public.+ (LEFTARG = timestamptz, RIGHTARG = interval, FUNCTION = public.plant_add); \
         CREATE DOMAIN public.text AS integer; \
         CREATE DOMAIN public.interval AS integer;",
    );
    c.batch_execute(
        "CREATE FUNCTION public.plant_add(timestamptz, interval) RETURNS timestamptz LANGUAGE sql AS \
         $$ INSERT INTO public.side_effects VALUES ('operator +'); SELECT '2000-01-01'::timestamptz $$;",
    )
    .expect("plant +");
    c.batch_execute(&plants).unwrap_or_else(|e| panic!("plants: {e}"));
    for table in ["task_queue", "lease_state", "semaphore_holders", "semaphore_state", "leader_state",
                  "scheduled_tasks", "task_execution_log", "lock_names", "rate_limit_gcra", "rate_limit_windows",
                  "id_generator", "role_capabilities"] {
        c.batch_execute(&format!(
            "CREATE TABLE public.{table} (LIKE public.side_effects); \
             CREATE TEMP TABLE {table} (LIKE public.side_effects);"
        ))
        .expect("look-alike tables");
    }
    c.batch_execute("SET search_path = pg_temp, public, pg_catalog").expect("hostile search_path");
    // The calls below qualify their own casts and operators: the plants are
    // meant for pg_distlock's statements, not for the test's.

    let calls: [(&str, &str); 20] = [
        (
            "SELECT task_name || ' ' || distlock.check_fencing_token(task_id, fencing_token)::pg_catalog.text \
               FROM distlock.worker_fetch_and_execute_task('h')",
            "report true",
        ),
        ("SELECT 'released' FROM distlock.release_task_lock(1, 'h', 'completed')", "released"),
        ("SELECT distlock.try_acquire_task_lock(1, 'h')", "t"),
        ("SELECT 'released' FROM distlock.release_task_lock(1, 'h', 'failed', 'boom')", "released"),
        ("SELECT distlock.acquire_lease('l', 'me', '1 hour') OPERATOR(pg_catalog.>) 0", "t"),
        ("SELECT distlock.renew_lease('l', 'me', '1 hour')", "t"),
        ("SELECT distlock.release_lease('l', 'me')", "t"),
        ("SELECT distlock.acquire_semaphore('s', 1, 'me', '1 hour')", "t"),
        ("SELECT distlock.release_semaphore('s', 'me')", "t"),
        ("SELECT is_leader FROM distlock.try_become_leader('g', 'me', '1 hour')", "t"),
        ("SELECT distlock.resign_leader('g', 'me')", "t"),
        ("SELECT distlock.check_rate_limit('k', 1, 60)::pg_catalog.text || distlock.check_rate_limit('k', 1, 60)::pg_catalog.text", "truefalse"),
        ("SELECT allowed FROM distlock.throttle('k', 0, 1, 60)", "t"),
        ("SELECT distlock.generate_snowflake_id(1) OPERATOR(pg_catalog.<) distlock.generate_snowflake_id(1)", "t"),
        ("SELECT distlock.lock('name')::pg_catalog.text || distlock.unlock('name')::pg_catalog.text", "truetrue"),
        ("SELECT distlock.enqueue_task('job', '{\"n\": 1}', pg_catalog.now(), 9) OPERATOR(pg_catalog.>) 0", "t"),
        ("SELECT payload::pg_catalog.text || ' ' || distlock.fail_task(task_id, 'again', 'h')::pg_catalog.text \
            FROM distlock.consume_task('h', '1 hour')", "{\"n\": 1} true"),
        ("SELECT distlock.enqueue_task('job', '{\"n\": 2}', pg_catalog.now(), 5) OPERATOR(pg_catalog.>) 0", "t"),
        ("SELECT distlock.complete_task(task_id, 'h') FROM distlock.consume_task('h', '1 hour')", "t"),
        ("SELECT count(*) FROM distlock.consume_tasks(10, 'h', '1 hour')", "0"),
    ];
    for (sql, expected) in calls {
        assert_eq!(scalar(&mut c, sql).as_deref(), Some(expected), "{sql}");
    }
    // Lease-mode task claims: the token is passed from call to call.
    let token = scalar(&mut c, "SELECT distlock.try_acquire_task_lease(1, 'h', '1 hour')").expect("lease claim");
    for (sql, expected) in [
        (format!("SELECT distlock.renew_task_lease(1, {token}, '1 hour') OPERATOR(pg_catalog.>) pg_catalog.now()"), "t"),
        (format!("SELECT distlock.check_fencing_token(1, {token})"), "t"),
        (format!("SELECT 'released' FROM distlock.release_task_lease(1, {token}, 'completed')"), "released"),
        ("SELECT acquired FROM distlock.worker_fetch_and_execute_task('h', '1 hour')".to_string(), "f"),
        ("SELECT count(*) FROM distlock.try_acquire_multiple_tasks('h', 5, '1 hour')".to_string(), "0"),
    ] {
        assert_eq!(scalar(&mut c, &sql).as_deref(), Some(expected), "{sql}");
    }
    c.batch_execute("RESET ROLE; SET search_path = DEFAULT").expect("reset");
    assert_eq!(rows(&mut c, "SELECT what FROM public.side_effects"), Vec::<String>::new(), "planted objects ran");
    for table in ["task_queue", "lease_state", "scheduled_tasks", "lock_names"] {
        assert_eq!(count(&mut c, &format!("SELECT 1 FROM public.{table}")), 0, "public.{table} was written");
    }
    // The real tables got the work.
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status IN ('completed', 'failed')"), 3);
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.completed_jobs"), 1);
}

/// An admin defines tasks but never writes a token: INSERT is granted on
/// the definition columns only, so a forged current_token is refused.
#[test]
fn an_admin_defines_tasks_but_cannot_forge_a_token() {
    let port = plain_port();
    let db = fresh_db_on(port, "privileges_forge");
    let mut c = connect_to(port, &db, "privileges");
    fresh_roles(&mut c, &["distlock_forger"]);
    c.batch_execute("SELECT distlock.grant_capability('distlock_forger', 'admin')").expect("admin");
    refused(
        &mut c,
        "distlock_forger",
        "INSERT INTO distlock.scheduled_tasks (id, task_name, task_type, current_token) VALUES (100, 'forged', 'x', 1)",
    );
    refused(
        &mut c,
        "distlock_forger",
        "INSERT INTO distlock.scheduled_tasks (id, task_name, task_type, lease_expires_at) VALUES (100, 'forged', 'x', now())",
    );
    refused(&mut c, "distlock_forger", "UPDATE distlock.scheduled_tasks SET current_token = 1");
    as_role(&mut c, "distlock_forger", |c| {
        c.batch_execute(
            "INSERT INTO distlock.scheduled_tasks (id, task_name, task_type, schedule_cron, timeout) \
             VALUES (100, 'defined', 'etl', '@daily', '1 hour')",
        )
    })
    .expect("an admin defines a task");
    assert_eq!(scalar(&mut c, "SELECT distlock.check_fencing_token(100, 1)").as_deref(), Some("f"));
}

/// A connection that keeps the notices and warnings it receives.
pub(crate) fn connect_keeping_notices(port: u16, db: &str) -> (Client, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let notices = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = notices.clone();
    let client = postgres::Config::new()
        .host("127.0.0.1")
        .port(port)
        .user("postgres")
        .dbname(db)
        .notice_callback(move |notice| sink.lock().expect("notices").push(notice.message().to_string()))
        .connect(NoTls)
        .expect("connect");
    (client, notices)
}

/// Updating from 0.1.0 through 0.2.0 to this version: EXECUTE grants that
/// no capability gives are revoked, each named in a WARNING; a 0.2.0 admin's
/// table-wide INSERT becomes the column list; pg_init_privs keeps only the
/// extension's own privileges, so users' grants survive pg_dump and
/// pg_restore.
#[test]
fn an_update_resets_grants_to_the_capabilities_and_keeps_users_grants_out_of_pg_init_privs() {
    let port = plain_port();
    let mut admin = connect_to(port, "postgres", "privileges");
    for db in ["privileges_init", "privileges_restored"] {
        admin.batch_execute(&format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).expect("drop");
    }
    admin.batch_execute("CREATE DATABASE privileges_init").expect("db");
    fresh_roles(&mut admin, &["distlock_reader", "distlock_consumer", "distlock_legacy", "distlock_admin"]);
    let (mut c, notices) = connect_keeping_notices(port, "privileges_init");
    // Users' grants recorded as the extension's own.
    let foreign_initial = |c: &mut Client| {
        rows(
            c,
            "SELECT pg_describe_object(ip.classoid, ip.objoid, ip.objsubid) || ' to ' || pg_get_userbyid(x.grantee) \
               FROM pg_init_privs ip \
               JOIN pg_depend d ON d.classid = ip.classoid AND d.objid = ip.objoid AND d.deptype = 'e' \
               JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'pg_distlock' \
              CROSS JOIN LATERAL aclexplode(ip.initprivs) x \
              WHERE ip.privtype = 'e' AND x.grantee NOT IN (e.extowner, 'pg_monitor'::regrole) ORDER BY 1",
        )
    };
    c.batch_execute(
        "CREATE EXTENSION pg_distlock VERSION '0.1.0'; \
         GRANT USAGE ON SCHEMA distlock TO distlock_reader, distlock_consumer, distlock_legacy; \
         GRANT SELECT ON distlock.queue_stats TO distlock_reader; \
         GRANT EXECUTE ON FUNCTION distlock.consume_task(text, interval) TO distlock_consumer, distlock_legacy; \
         GRANT EXECUTE ON FUNCTION distlock.complete_task(bigint, text) TO distlock_legacy; \
         ALTER EXTENSION pg_distlock UPDATE TO '0.2.0'; \
         SELECT distlock.grant_capability('distlock_consumer', 'consumer'); \
         SELECT distlock.grant_capability('distlock_admin', 'admin');",
    )
    .expect("0.1.0, users' grants, 0.2.0 and capabilities");
    assert!(
        foreign_initial(&mut c).iter().any(|line| line.contains("distlock_consumer")),
        "the 0.1.0 -> 0.2.0 script records the grant it carries over as the extension's own"
    );
    notices.lock().expect("notices").clear();
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update");
    let said = notices.lock().expect("notices").join("\n");
    for expected in [
        "revoked EXECUTE on function distlock.complete_task(bigint,text) from distlock_legacy",
        "revoked INSERT ON distlock.scheduled_tasks FROM distlock_admin",
    ] {
        assert!(said.contains(expected), "no WARNING \"{expected}\" in:\n{said}");
    }
    assert!(!said.contains("distlock_consumer"), "a grant the consumer capability gives was taken away:\n{said}");
    let privilege = |c: &mut Client, sql: &str| scalar(c, sql).as_deref() == Some("t");
    let consumer_consumes = "SELECT has_function_privilege('distlock_consumer', \
                              'distlock.consume_task(text, interval, interval, text[])', 'EXECUTE')";
    assert!(privilege(&mut c, consumer_consumes));
    assert!(!privilege(&mut c, "SELECT has_function_privilege('distlock_legacy', 'distlock.complete_task(bigint, text)', 'EXECUTE')"));
    assert!(!privilege(&mut c, "SELECT has_column_privilege('distlock_admin', 'distlock.scheduled_tasks', 'current_token', 'INSERT')"));
    assert!(privilege(&mut c, "SELECT has_column_privilege('distlock_admin', 'distlock.scheduled_tasks', 'task_name', 'INSERT')"));
    assert!(privilege(&mut c, "SELECT has_table_privilege('distlock_reader', 'distlock.queue_stats', 'SELECT')"));
    let foreign = foreign_initial(&mut c);
    assert!(foreign.is_empty(), "users' grants recorded as the extension's own: {foreign:?}");

    let dump = format!("/tmp/pg_distlock_privileges_{}.pgdump", std::process::id());
    pg_tool(port, "pg_dump", &["-Fc", "-f", &dump, "privileges_init"]);
    admin.batch_execute("DROP DATABASE IF EXISTS privileges_restored WITH (FORCE)").expect("drop");
    admin.batch_execute("CREATE DATABASE privileges_restored").expect("db");
    pg_tool(port, "pg_restore", &["--exit-on-error", "-d", "privileges_restored", &dump]);
    let _ = std::fs::remove_file(&dump);
    let mut restored = connect_to(port, "privileges_restored", "privileges");
    assert!(privilege(&mut restored, "SELECT has_table_privilege('distlock_reader', 'distlock.queue_stats', 'SELECT')"), "a user's grant was lost in the restore");
    assert!(privilege(&mut restored, consumer_consumes), "a user's grant was lost in the restore");
    assert!(privilege(&mut restored, "SELECT has_column_privilege('distlock_admin', 'distlock.scheduled_tasks', 'task_name', 'INSERT')"));
    assert!(!privilege(&mut restored, "SELECT has_column_privilege('distlock_admin', 'distlock.scheduled_tasks', 'current_token', 'INSERT')"));
}
