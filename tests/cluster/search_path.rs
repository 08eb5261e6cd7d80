//! The caller's search_path never reaches pg_distlock's statements.
//!
//! pg_distlock runs its statements with the extension owner's rights, so a
//! name in them that the caller's search_path resolves would run the
//! caller's code as the owner. Nothing here is a hand-written list of what
//! to shadow: every statement the library runs (each file in sql/queries,
//! which is all the SQL the library holds) is compiled by PostgreSQL into a
//! SQL-standard function body, whose recorded dependencies name every
//! function, aggregate, operator, type and relation it uses. A hostile role
//! plants a recording look-alike of each one first on its search_path (and
//! in pg_temp), calls every function of the extension, and no look-alike may
//! have run.

use std::collections::BTreeSet;
use std::path::Path;

use crate::support::*;

const HOSTILE: &str = "distlock_sp_hostile";

fn rows(c: &mut Client, sql: &str) -> Vec<postgres::Row> {
    c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}"))
}

/// Every statement the library runs: (file name, SQL).
fn library_statements() -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sql/queries");
    let mut statements: Vec<(String, String)> = std::fs::read_dir(&dir)
        .expect("sql/queries")
        .map(|entry| entry.expect("entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "sql"))
        .map(|path| {
            let sql = std::fs::read_to_string(&path).expect("read statement");
            let name = path.file_name().expect("name").to_string_lossy().into_owned();
            (name, sql.trim().trim_end_matches(';').to_string())
        })
        .collect();
    statements.sort();
    assert!(statements.len() > 50, "read only {} statements", statements.len());
    statements
}

/// The library keeps all its SQL in sql/queries: a statement written inline
/// in Rust would escape the derivation below.
#[test]
fn the_library_runs_no_sql_outside_sql_queries() {
    let mut inline = Vec::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    let starts_statement = |line: &str| {
        ["\"SELECT ", "\"INSERT ", "\"UPDATE ", "\"DELETE ", "\"WITH ", "\"CALL ", "\"DO ", "\"LOCK "]
            .iter()
            .any(|start| line.contains(start))
    };
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).expect("dir").map(|e| e.expect("entry").path()));
            continue;
        }
        let name = path.file_name().expect("name").to_string_lossy().into_owned();
        if !name.ends_with(".rs") || name.ends_with("_tests.rs") || name == "test_sql.rs" {
            continue;
        }
        let source = std::fs::read_to_string(&path).expect("read");
        // Test modules at the end of a file run their own SQL, as a test.
        let library_part = source.split("#[cfg(any(test, feature = \"pg_test\"))]\n#[pg_schema]").next().unwrap_or("");
        for (number, line) in library_part.lines().enumerate() {
            if starts_statement(line) {
                inline.push(format!("{}:{}: {}", path.display(), number + 1, line.trim()));
            }
        }
    }
    assert!(inline.is_empty(), "SQL written inline instead of in sql/queries:\n{}", inline.join("\n"));
}

/// An object one of the statements depends on.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Used {
    Function(u32),
    Operator(u32),
    Type(u32),
    Relation(u32),
}

/// The parameter types a statement file declares on its `-- params:` line
/// (the library refuses to prepare a statement whose line disagrees).
fn declared_parameters(file: &str, sql: &str) -> Vec<String> {
    let list = sql
        .lines()
        .find_map(|line| line.strip_prefix("-- params:"))
        .unwrap_or_else(|| panic!("{file} has no \"-- params:\" line"));
    list.split(',').map(|t| t.trim().to_string()).filter(|t| t != "none").collect()
}

/// Compiles each statement, with the parameter types the library prepares
/// it with, into a `BEGIN ATOMIC` function and reads what PostgreSQL
/// recorded that function depends on.
fn objects_the_statements_use(c: &mut Client) -> BTreeSet<Used> {
    c.batch_execute("DROP SCHEMA IF EXISTS probe CASCADE; CREATE SCHEMA probe").expect("probe schema");
    let mut used = BTreeSet::new();
    for (number, (file, sql)) in library_statements().iter().enumerate() {
        let types = declared_parameters(file, sql);
        c.batch_execute(&format!(
            "CREATE FUNCTION probe.statement_{number}({}) RETURNS void LANGUAGE sql BEGIN ATOMIC {sql}; END",
            types.join(", ")
        ))
        .unwrap_or_else(|e| panic!("{file} does not compile into a function body: {e:?}"));
    }
    // Dependencies on built-in objects are not recorded in pg_depend (they
    // are pinned), so the parsed bodies themselves are read: every OID of a
    // function, aggregate, operator, type and relation in the node trees.
    let bodies: Vec<String> = rows(
        c,
        "SELECT prosqlbody::text FROM pg_proc WHERE pronamespace = 'probe'::regnamespace",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    for body in &bodies {
        for (field, oid) in node_tree_oids(body) {
            used.insert(match field.as_str() {
                "funcid" | "aggfnoid" | "winfnoid" => Used::Function(oid),
                "opno" | "opnos" => Used::Operator(oid),
                "relid" | "regclass" => Used::Relation(oid),
                _ => Used::Type(oid),
            });
        }
    }
    used
}

/// (field, OID) pairs of a node tree's text: functions (funcid, aggfnoid,
/// winfnoid), operators (opno, the opnos of a row comparison), relations
/// (relid, and regclass constants such as nextval's argument) and every
/// field that names a type (consttype, resulttype, vartype, paramtype, ...).
fn node_tree_oids(tree: &str) -> Vec<(String, u32)> {
    let mut found = Vec::new();
    let tokens: Vec<&str> = tree.split(|ch: char| ch.is_whitespace() || ch == '{' || ch == '}').filter(|t| !t.is_empty()).collect();
    let number = |t: &str| t.trim_matches(|ch| ch == '(' || ch == ')').parse::<u32>().ok().filter(|n| *n > 0);
    let mut i = 0;
    while i < tokens.len() {
        let Some(field) = tokens[i].strip_prefix(':') else {
            i += 1;
            continue;
        };
        // Fields that end like a type's but hold an enum value (a row
        // comparison's kind is rctype up to PostgreSQL 17, cmptype from 18).
        let enum_field = matches!(field, "jointype" | "nulltesttype" | "booltesttype" | "rctype" | "cmptype");
        let is_type = !enum_field && (field.ends_with("type") || field.ends_with("typeid") || field == "typeId");
        match field {
            "funcid" | "aggfnoid" | "winfnoid" | "opno" | "relid" => {
                if let Some(oid) = tokens.get(i + 1).and_then(|t| number(t)) {
                    found.push((field.to_string(), oid));
                }
            }
            // (o 98 664)
            "opnos" => {
                let mut j = i + 1;
                while let Some(token) = tokens.get(j) {
                    if token.starts_with(':') {
                        break;
                    }
                    if let Some(oid) = number(token) {
                        found.push(("opnos".to_string(), oid));
                    }
                    j += 1;
                }
            }
            // A regclass constant: ":constvalue 4 [ b0 b1 b2 b3 0 0 0 0 ]" after ":consttype 2205".
            "consttype" if tokens.get(i + 1) == Some(&"2205") => {
                found.push(("consttype".to_string(), 2205));
                if let Some(at) = tokens[i..].iter().position(|t| *t == ":constvalue") {
                    let bytes: Vec<u32> = tokens[i + at + 3..].iter().take(4).filter_map(|t| t.parse::<i64>().ok()).map(|b| (b & 0xff) as u32).collect();
                    if bytes.len() == 4 {
                        found.push(("regclass".to_string(), bytes[0] | bytes[1] << 8 | bytes[2] << 16 | bytes[3] << 24));
                    }
                }
            }
            _ if is_type => {
                if let Some(oid) = tokens.get(i + 1).and_then(|t| number(t)) {
                    found.push((field.to_string(), oid));
                }
            }
            _ => {}
        }
        i += 1;
    }
    found
}

/// A node tree's text without the `:location` values, which count from the
/// start of the CREATE FUNCTION command and so differ with its name.
fn without_locations(tree: &str) -> String {
    let mut out = Vec::new();
    let mut skip_next = false;
    for token in tree.split(' ') {
        if skip_next {
            skip_next = false;
            out.push(token.trim_start_matches(|ch: char| ch == '-' || ch.is_ascii_digit()));
            continue;
        }
        skip_next = token == ":location" || token == ":stmt_location";
        out.push(token);
    }
    out.join(" ")
}

/// Statements whose parsed body differs when compiled under the session's
/// current search_path from their body in schema probe (compiled under the
/// default one). Locations and everything else are the same text parsed
/// again, so any difference is a name that resolved to another object.
fn statements_resolved_differently(c: &mut Client) -> Vec<String> {
    let mut differ = Vec::new();
    // The parameter types as the library passes them (by OID); only the
    // statement text is parsed under the hostile path.
    let qualified = |t: &String| match t.as_str() {
        "bigint" | "integer" | "boolean" | "interval" | "bigint[]" | "integer[]" => t.clone(),
        _ => format!("pg_catalog.{t}"),
    };
    for (number, (file, sql)) in library_statements().iter().enumerate() {
        let types: Vec<String> = declared_parameters(file, sql).iter().map(qualified).collect();
        let created = c.batch_execute(&format!(
            "CREATE FUNCTION pg_temp.statement_{number}({}) RETURNS void LANGUAGE sql BEGIN ATOMIC {sql}; END",
            types.join(", ")
        ));
        if let Err(e) = created {
            differ.push(format!("{file}: {e}"));
            continue;
        }
        let bodies: Vec<String> = rows(
            c,
            &format!(
                "SELECT p.prosqlbody::pg_catalog.text FROM pg_catalog.pg_proc p \
                  WHERE p.proname OPERATOR(pg_catalog.=) 'statement_{number}' \
                    AND p.pronamespace OPERATOR(pg_catalog.=) ANY (ARRAY['probe'::pg_catalog.regnamespace::pg_catalog.oid, \
                                                                        pg_catalog.pg_my_temp_schema()])"
            ),
        )
        .iter()
        .map(|r| without_locations(&r.get::<_, String>(0)))
        .collect();
        let same = bodies.len() == 2 && bodies[0] == bodies[1];
        if !same {
            differ.push(file.clone());
        }
    }
    differ
}

fn one_string(c: &mut Client, sql: &str) -> String {
    c.query_one(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).get(0)
}

/// A look-alike: what it imitates, the SQL that plants it, and a query
/// that is true once it has run.
struct Plant {
    what: String,
    create: String,
    ran: String,
}

/// Plants a recording look-alike of `object` as plant `n`; None for what no
/// name can reach (pseudo-types, array types, row types).
fn plant(c: &mut Client, n: usize, object: &Used) -> Option<Plant> {
    let ran = format!("SELECT is_called FROM {HOSTILE}.hit_{n}");
    plant_sql(c, n, object).map(|(what, create, ran_instead)| Plant {
        what,
        create: format!("CREATE SEQUENCE {HOSTILE}.hit_{n}; GRANT ALL ON SEQUENCE {HOSTILE}.hit_{n} TO PUBLIC; {create}"),
        ran: ran_instead.unwrap_or(ran),
    })
}

fn plant_sql(c: &mut Client, n: usize, object: &Used) -> Option<(String, String, Option<String>)> {
    let pin = "SET search_path = pg_catalog, pg_temp";
    let hit = format!("PERFORM {HOSTILE}.hit({n});");
    match *object {
        Used::Function(oid) => {
            // A record made by OUT parameters (pg_prepared_xact()) is planted
            // as declared: its arguments name every column.
            let row = c
                .query_one(
                    "SELECT p.proname::text, p.oid::regprocedure::text, p.prokind::text, \
                            pg_get_function_arguments(p.oid), pg_get_function_result(p.oid), p.proretset, \
                            p.pronargs::int, p.prorettype::regtype::text, n.nspname::text, \
                            EXISTS (SELECT 1 FROM unnest(p.proargtypes::oid[] || p.prorettype) t \
                                     JOIN pg_type ty ON ty.oid = t WHERE ty.typtype = 'p' \
                                      AND ty.typname NOT IN ('void', 'anyelement', 'anyarray') \
                                      AND NOT (ty.typname = 'record' AND p.proallargtypes IS NOT NULL)) \
                       FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE p.oid = $1",
                    &[&pg_oid(oid)],
                )
                .expect("function");
            let (name, signature, kind, args, result, retset, nargs, rettype, schema, pseudo): (
                String, String, String, String, String, bool, i32, String, String, bool,
            ) = (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5), row.get(6), row.get(7), row.get(8), row.get(9));
            assert!(!pseudo, "{signature} takes or returns a pseudo-type: plant it by hand");
            let quoted = one_string(c, &format!("SELECT quote_ident('{name}')"));
            let positional: Vec<String> = (1..=nargs).map(|i| format!("${i}")).collect();
            let sql = if kind == "a" {
                let arg_types = one_string(c, &format!("SELECT pg_get_function_identity_arguments({oid})"));
                let state_args = if arg_types.is_empty() { rettype.clone() } else { format!("{rettype}, {arg_types}") };
                let aggregate_args = if arg_types.is_empty() { "*".to_string() } else { arg_types };
                format!(
                    "CREATE FUNCTION {HOSTILE}.plant_{n}({state_args}) RETURNS {rettype} LANGUAGE plpgsql {pin} \
                     AS $$ BEGIN {hit} RETURN $1; END $$; \
                     CREATE FUNCTION {HOSTILE}.plant_{n}_final({rettype}) RETURNS {rettype} LANGUAGE plpgsql {pin} \
                     AS $$ BEGIN {hit} RETURN $1; END $$; \
                     CREATE AGGREGATE {HOSTILE}.{quoted}({aggregate_args}) \
                       (SFUNC = {HOSTILE}.plant_{n}, STYPE = {rettype}, FINALFUNC = {HOSTILE}.plant_{n}_final);"
                )
            } else {
                let call = format!("{schema}.{quoted}({})", positional.join(", "));
                let body = if retset { format!("RETURN QUERY SELECT * FROM {call};") } else { format!("RETURN {call};") };
                format!(
                    "CREATE FUNCTION {HOSTILE}.{quoted}({args}) RETURNS {result} LANGUAGE plpgsql {pin} \
                     AS $$ BEGIN {hit} {body} END $$;"
                )
            };
            let qualified = if signature.starts_with(&format!("{schema}.")) { signature } else { format!("{schema}.{signature}") };
            Some((format!("function {qualified}"), sql, None))
        }
        Used::Operator(oid) => {
            let row = c
                .query_one(
                    "SELECT o.oprname::text, o.oprleft::regtype::text, o.oprright::regtype::text, \
                            o.oprresult::regtype::text, n.nspname::text, o.oprleft = 0 \
                       FROM pg_operator o JOIN pg_namespace n ON n.oid = o.oprnamespace WHERE o.oid = $1",
                    &[&pg_oid(oid)],
                )
                .expect("operator");
            let (op, left, right, result, schema, prefix): (String, String, String, String, String, bool) =
                (row.get(0), row.get(1), row.get(2), row.get(3), row.get(4), row.get(5));
            let (params, apply, args) = if prefix {
                (right.clone(), format!("OPERATOR({schema}.{op}) $1"), format!("RIGHTARG = {right}"))
            } else {
                (
                    format!("{left}, {right}"),
                    format!("$1 OPERATOR({schema}.{op}) $2"),
                    format!("LEFTARG = {left}, RIGHTARG = {right}"),
                )
            };
            Some((
                format!("operator {schema}.{op}({left}, {right})"),
                format!(
                    "CREATE FUNCTION {HOSTILE}.plant_{n}({params}) RETURNS {result} LANGUAGE plpgsql {pin} \
                     AS $$ BEGIN {hit} RETURN {apply}; END $$; \
                     CREATE OPERATOR {HOSTILE}.{op} ({args}, FUNCTION = {HOSTILE}.plant_{n});"
                ),
                None,
            ))
        }
        Used::Type(oid) => {
            let row = c
                .query_one(
                    "SELECT t.typname::text, format_type(t.oid, NULL), t.typtype::text, t.typcategory::text \
                       FROM pg_type t WHERE t.oid = $1",
                    &[&pg_oid(oid)],
                )
                .expect("type");
            let (name, full, typtype, category): (String, String, String, String) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            if typtype == "p" || typtype == "c" || category == "A" {
                return None;
            }
            let quoted = one_string(c, &format!("SELECT quote_ident('{name}')"));
            let base = one_string(c, &format!("SELECT {oid}::oid::regtype::text"));
            Some((
                format!("type {full}"),
                format!(
                    "CREATE FUNCTION {HOSTILE}.plant_{n}() RETURNS boolean LANGUAGE plpgsql {pin} \
                     AS $$ BEGIN {hit} RETURN true; END $$; \
                     CREATE DOMAIN {HOSTILE}.{quoted} AS {base} CHECK ({HOSTILE}.plant_{n}());"
                ),
                None,
            ))
        }
        Used::Relation(oid) => {
            let row = c
                .query_one("SELECT relname::text, relkind::text, oid::regclass::text FROM pg_class WHERE oid = $1", &[&pg_oid(oid)])
                .expect("relation");
            let (name, kind, qualified): (String, String, String) = (row.get(0), row.get(1), row.get(2));
            let (sql, ran) = match kind.as_str() {
                // Readers and writers of a look-alike table go through a view
                // whose condition (checked on insert too) records them.
                "r" | "v" => (
                    format!(
                        "CREATE TABLE {HOSTILE}.{name} AS SELECT * FROM {qualified} WITH NO DATA; \
                         GRANT ALL ON {HOSTILE}.{name} TO PUBLIC; \
                         CREATE TEMP VIEW {name} AS SELECT * FROM {HOSTILE}.{name} WHERE {HOSTILE}.hit({n}) \
                           WITH CHECK OPTION; \
                         GRANT ALL ON pg_temp.{name} TO PUBLIC;"
                    ),
                    None,
                ),
                "S" => (
                    format!(
                        "CREATE SEQUENCE {HOSTILE}.{name}; CREATE TEMP SEQUENCE {name}; \
                         GRANT ALL ON SEQUENCE {HOSTILE}.{name}, pg_temp.{name} TO PUBLIC;"
                    ),
                    Some(format!(
                        "SELECT (SELECT is_called FROM {HOSTILE}.{name}) OR (SELECT is_called FROM pg_temp.{name})"
                    )),
                ),
                _ => return None,
            };
            Some((format!("relation {qualified}"), sql, ran))
        }
    }
}

fn pg_oid(oid: u32) -> postgres::types::Oid {
    oid
}

/// One call of each function of the extension, as the hostile role (with
/// every capability), in an order that gives each something to act on.
/// (signature, SQL); the SQL names nothing unqualified itself.
const CALLS: &[(&str, &str)] = &[
    ("distlock.scheduled_tasks_check()",
     "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
      VALUES ('report', 'etl', '@hourly', '2000-01-01'), ('nightly', 'etl', '@daily', '2000-01-01'), \
             ('cron-only', 'etl', '*/5 * * * *', NULL)"),
    ("distlock.cron_next(text,timestamp with time zone)", "SELECT distlock.cron_next('@hourly', '2026-01-01')"),
    ("distlock.cron_next(text,timestamp with time zone,text)",
     "SELECT distlock.cron_next('@hourly', '2026-01-01', 'Europe/Berlin')"),
    ("distlock.lock_id(text)", "SELECT distlock.lock_id('x')"),
    ("distlock.get_task_lock_id(text)", "SELECT distlock.get_task_lock_id('report')"),
    ("distlock.task_lock_class()", "SELECT distlock.task_lock_class()"),
    ("distlock.worker_fetch_and_execute_task(text)", "SELECT * FROM distlock.worker_fetch_and_execute_task('h')"),
    ("distlock.check_fencing_token(integer,bigint)",
     "SELECT distlock.check_fencing_token(1, t.current_token) FROM distlock.scheduled_tasks t WHERE t.id OPERATOR(pg_catalog.=) 1"),
    ("distlock.release_task_lock(integer,text,text,text)", "SELECT distlock.release_task_lock(1, 'h', 'completed')"),
    ("distlock.try_acquire_task_lock(integer,text)", "SELECT distlock.try_acquire_task_lock(1, 'h')"),
    ("distlock.try_acquire_multiple_tasks(text,integer)", "SELECT * FROM distlock.try_acquire_multiple_tasks('h', 5)"),
    ("distlock.check_and_recover_timeout_tasks(integer)", "SELECT * FROM distlock.check_and_recover_timeout_tasks(30)"),
    ("distlock.release_task_lock(integer,text,text,text)",
     "SELECT distlock.release_task_lock(t.id, 'h', 'completed') FROM distlock.scheduled_tasks t \
       WHERE t.current_token IS NOT NULL AND distlock.check_fencing_token(t.id, t.current_token)"),
    ("distlock.try_acquire_task_lease(integer,text,interval)", "SELECT distlock.try_acquire_task_lease(1, 'h', '1 hour')"),
    ("distlock.renew_task_lease(integer,bigint,interval)",
     "SELECT distlock.renew_task_lease(1, t.current_token, '1 hour') FROM distlock.scheduled_tasks t WHERE t.id OPERATOR(pg_catalog.=) 1"),
    ("distlock.release_task_lease(integer,bigint,text,text)",
     "SELECT distlock.release_task_lease(1, t.current_token, 'failed', 'boom') FROM distlock.scheduled_tasks t WHERE t.id OPERATOR(pg_catalog.=) 1"),
    ("distlock.release_and_fetch_task(integer,text,text,text)",
     "SELECT distlock.try_acquire_task_lock(2, 'h'); \
      UPDATE distlock.scheduled_tasks SET next_run_at = '2000-01-01' WHERE id OPERATOR(pg_catalog.=) 3; \
      SELECT * FROM distlock.release_and_fetch_task(2, 'h', 'completed')"),
    ("distlock.release_and_fetch_task(integer,bigint,text,text,interval,text)",
     "SELECT distlock.release_task_lock(3, 'h', 'completed'); \
      SELECT distlock.try_acquire_task_lease(2, 'h', '1 hour'); \
      UPDATE distlock.scheduled_tasks SET next_run_at = '2000-01-01' WHERE id OPERATOR(pg_catalog.=) 3; \
      SELECT r.* FROM distlock.scheduled_tasks t, \
             LATERAL distlock.release_and_fetch_task(2, t.current_token, 'completed', 'h', '1 hour') r \
       WHERE t.id OPERATOR(pg_catalog.=) 2"),
    ("distlock.worker_fetch_and_execute_task(text,interval)", "SELECT * FROM distlock.worker_fetch_and_execute_task('h', '1 hour')"),
    ("distlock.try_acquire_multiple_tasks(text,integer,interval)", "SELECT * FROM distlock.try_acquire_multiple_tasks('h', 5, '1 hour')"),
    ("distlock.prune_execution_log(interval)", "SELECT distlock.prune_execution_log('0 seconds')"),
    ("distlock.next_task_wait()", "SELECT distlock.next_task_wait()"),
    ("distlock.run_task_now(integer)",
     "UPDATE distlock.scheduled_tasks SET is_enabled = true, next_run_at = '2100-01-01' WHERE id OPERATOR(pg_catalog.=) 1; \
      SELECT distlock.run_task_now(1), distlock.run_task_now(1)"),
    ("distlock.lock(bigint,interval,boolean,boolean)", "SELECT distlock.lock(42::bigint)"),
    ("distlock.unlock(bigint,boolean)", "SELECT distlock.unlock(42::bigint)"),
    ("distlock.try_lock(bigint,boolean,boolean)", "SELECT distlock.try_lock(43::bigint)"),
    ("distlock.lock(text,interval,boolean,boolean)", "SELECT distlock.lock('name', '1 second')"),
    ("distlock.unlock(text,boolean)", "SELECT distlock.unlock('name')"),
    ("distlock.try_lock(text,boolean,boolean)", "SELECT distlock.try_lock('other')"),
    ("distlock.unlock_all()", "SELECT distlock.unlock_all()"),
    ("distlock.lock_stats_entries()", "SELECT * FROM distlock.lock_stats_entries()"),
    ("distlock.in_monitor_scope(text,text)", "SELECT distlock.in_monitor_scope('report', 'etl')"),
    ("distlock.reset_lock_stats()", "SELECT distlock.reset_lock_stats()"),
    ("distlock.prune_lock_names(interval)", "SELECT distlock.prune_lock_names('0 seconds')"),
    ("distlock.acquire_lease(text,text,interval)", "SELECT distlock.acquire_lease('l', 'me', '1 hour')"),
    ("distlock.check_lease_token(text,bigint)",
     "SELECT distlock.check_lease_token('l', distlock.acquire_lease('l', 'me', '1 hour'))"),
    ("distlock.renew_lease(text,text,interval)", "SELECT distlock.renew_lease('l', 'me', '1 hour')"),
    ("distlock.release_lease(text,text)", "SELECT distlock.release_lease('l', 'me')"),
    ("distlock.force_release_lease(text)",
     "SELECT distlock.acquire_lease('l2', 'me', '1 hour'), distlock.force_release_lease('l2')"),
    ("distlock.prune_leases(interval)", "SELECT distlock.prune_leases('0 seconds')"),
    ("distlock.acquire_semaphore(text,integer,text,interval)", "SELECT distlock.acquire_semaphore('s', 2, 'me', '1 hour')"),
    ("distlock.release_semaphore(text,text)", "SELECT distlock.release_semaphore('s', 'me')"),
    ("distlock.try_become_leader(text,text,interval)", "SELECT * FROM distlock.try_become_leader('g', 'me', '1 hour')"),
    ("distlock.resign_leader(text,text)", "SELECT distlock.resign_leader('g', 'me')"),
    ("distlock.check_rate_limit(text,integer,integer)", "SELECT distlock.check_rate_limit('k', 1, 60), distlock.check_rate_limit('k', 1, 60)"),
    ("distlock.throttle(text,integer,integer,double precision,integer)", "SELECT * FROM distlock.throttle('t', 1, 1, 60)"),
    ("distlock.rate_limit_status(text)", "SELECT * FROM distlock.rate_limit_status('k')"),
    ("distlock.reset_rate_limit(text)", "SELECT distlock.reset_rate_limit('k')"),
    ("distlock.rate_limit_keys()", "SELECT * FROM distlock.rate_limit_keys()"),
    ("distlock.lease_backend_connected(integer)", "SELECT distlock.lease_backend_connected(1)"),
    ("distlock.lease_backend_alive(integer)", "SELECT distlock.lease_backend_alive(1)"),
    ("distlock.lock_owner_published(integer)", "SELECT distlock.lock_owner_published(1)"),
    ("distlock.lock_owner(integer)", "SELECT distlock.lock_owner(1)"),
    ("distlock.reset_rate_limits(text)", "SELECT distlock.reset_rate_limits('k'), distlock.reset_rate_limits()"),
    ("distlock.generate_snowflake_id(integer)", "SELECT distlock.generate_snowflake_id(1)"),
    ("distlock.snowflake_timestamp(bigint)", "SELECT distlock.snowflake_timestamp(distlock.generate_snowflake_id(1))"),
    ("distlock.snowflake_worker_id(bigint)", "SELECT distlock.snowflake_worker_id(distlock.generate_snowflake_id(1))"),
    ("distlock.snowflake_sequence(bigint)", "SELECT distlock.snowflake_sequence(distlock.generate_snowflake_id(1))"),
    ("distlock.bump_version()",
     "CREATE TABLE pg_temp.accounts (id int PRIMARY KEY, version int NOT NULL DEFAULT 1); \
      INSERT INTO pg_temp.accounts (id) VALUES (1); \
      CREATE TRIGGER accounts_version BEFORE UPDATE ON pg_temp.accounts FOR EACH ROW EXECUTE FUNCTION distlock.bump_version(); \
      UPDATE pg_temp.accounts SET version = 1"),
    ("distlock.enqueue_task(text,jsonb,timestamp with time zone,integer,integer,text,text,text,interval)",
     "SELECT distlock.enqueue_task('job', '{\"n\": 1}', '2000-01-01', 9), distlock.enqueue_task('job', '{\"n\": 2}', '2000-01-01', 5), \
             distlock.enqueue_task('job', '{\"n\": 3}', '2000-01-01', 1), distlock.enqueue_task('job', '{\"n\": 4}', '2000-01-01', 0), \
             distlock.enqueue_task('job', '{\"n\": 5}', '2000-01-01', 0, 5, 'q'), \
             distlock.enqueue_task('job', '{\"n\": 7}', '2000-01-01', 0, 5, 'q', 'key'), \
             distlock.enqueue_task('job', '{\"n\": 7}', '2000-01-01', 0, 5, 'q', 'key'), \
             distlock.enqueue_task('job', '{\"n\": 10}', '2000-01-01', 0, 5, 'q', 'key2', 'grp'), \
             distlock.enqueue_task('job', '{\"n\": 11}', '2000-01-01', 0, 5, 'q', NULL, 'grp'), \
             distlock.enqueue_task('job', '{\"n\": 13}', '2000-01-01', 0, 5, 'q', 'key3', NULL, '1 hour')"),
    ("distlock.enqueue_tasks(text,jsonb[],timestamp with time zone,integer,integer,text,text)",
     "SELECT distlock.enqueue_tasks('job', ARRAY['{\"n\": 8}', '{\"n\": 9}']::pg_catalog.jsonb[], '2000-01-01', 0, 5, 'many'), \
             distlock.enqueue_tasks('job', ARRAY['{\"n\": 12}']::pg_catalog.jsonb[], '2000-01-01', 0, 5, 'many', 'grp')"),
    ("distlock.consume_task(text,interval,interval,text[])", "SELECT * FROM distlock.consume_task('h', '1 hour')"),
    ("distlock.extend_task_lease(bigint,interval,text)", "SELECT distlock.extend_task_lease(1, '1 hour', 'h')"),
    ("distlock.extend_task_lease(bigint,interval,text,integer)", "SELECT distlock.extend_task_lease(1, '1 hour', 'h', 1)"),
    ("distlock.fail_task(bigint,text,text)", "SELECT distlock.fail_task(1, 'again', 'h')"),
    ("distlock.consume_tasks(integer,text,interval,interval,text[])", "SELECT * FROM distlock.consume_tasks(3, 'h', '1 hour')"),
    ("distlock.queue_wait_stats()", "SELECT * FROM distlock.queue_wait_stats()"),
    ("distlock.queue_counters()", "SELECT * FROM distlock.queue_counters()"),
    ("distlock.reset_queue_counters(text)", "SELECT distlock.reset_queue_counters('q'), distlock.reset_queue_counters()"),
    ("distlock.pause_queue(text)", "SELECT distlock.pause_queue('q')"),
    ("distlock.consume_tasks(integer,text,interval,interval,text[])",
     "SELECT * FROM distlock.consume_tasks(3, 'h', '1 hour', NULL, ARRAY['q'])"),
    ("distlock.resume_queue(text)", "SELECT distlock.resume_queue('q')"),
    ("distlock.set_queue_limit(text,integer)", "SELECT distlock.set_queue_limit('q', 1)"),
    ("distlock.consume_tasks(integer,text,interval,interval,text[])",
     "SELECT * FROM distlock.consume_tasks(3, 'h', '1 hour', NULL, ARRAY['q'])"),
    // A limited queue: its claim turn, count and claim, and every queue's claim after the others'.
    ("distlock.enqueue_task(text,jsonb,timestamp with time zone,integer,integer,text,text,text,interval)",
     "SELECT distlock.enqueue_task('job', '{\"n\": 6}', '2000-01-01', 0, 5, 'q')"),
    ("distlock.consume_tasks(integer,text,interval,interval,text[])",
     "SELECT * FROM distlock.consume_tasks(3, 'h', '1 hour', NULL, ARRAY['q'])"),
    ("distlock.consume_tasks(integer,text,interval,interval,text[])", "SELECT * FROM distlock.consume_tasks(3, 'h', '1 hour')"),
    ("distlock.settle_and_consume_tasks(integer,text,bigint[],integer[],bigint[],integer[],text[],interval,interval,text[])",
     "SELECT * FROM distlock.settle_and_consume_tasks(2, 'h', ARRAY[3], NULL, ARRAY[4], NULL, ARRAY['e'], '1 hour')"),
    ("distlock.complete_task(bigint,text)", "SELECT distlock.complete_task(2, 'h')"),
    ("distlock.complete_task(bigint,text,integer)", "SELECT distlock.complete_task(3, 'h', 1)"),
    ("distlock.fail_task(bigint,text,text,integer)", "SELECT distlock.fail_task(4, 'again', 'h', 1)"),
    ("distlock.complete_tasks(bigint[],text,integer[])",
     "SELECT distlock.complete_tasks(ARRAY[1]::bigint[], 'h', ARRAY[2]::integer[])"),
    // An empty queue: the wait looks at when the next job is due.
    ("distlock.consume_task(text,interval,interval,text[])", "SELECT * FROM distlock.consume_task('h', '1 hour', '0.3 seconds')"),
    ("distlock.consume_task(text,interval,interval,text[])",
     "SELECT * FROM distlock.consume_task('h', '1 hour', '0.3 seconds', ARRAY['q'])"),
    ("distlock.prune_jobs(interval)", "SELECT distlock.prune_jobs('0 seconds')"),
    ("distlock.retry_dead_jobs(text,bigint[])", "SELECT distlock.retry_dead_jobs('q', ARRAY[1]::bigint[])"),
    ("distlock.delete_dead_jobs(text,bigint[])", "SELECT distlock.delete_dead_jobs('q', ARRAY[1]::bigint[])"),
    ("distlock.requeue_jobs(text,bigint[])", "SELECT distlock.requeue_jobs('q', ARRAY[1]::bigint[])"),
    ("distlock.purge_queue(text,boolean)", "SELECT distlock.purge_queue('q-purged', true)"),
];

/// Functions only the extension's owner may call; called by the owner with
/// the hostile search_path in force.
const OWNER_CALLS: &[(&str, &str)] = &[
    ("distlock.capability_privileges(text)", "SELECT * FROM distlock.capability_privileges('worker')"),
    ("distlock.revoke_capability(regrole,text)", "SELECT distlock.revoke_capability('distlock_sp_hostile', 'monitor')"),
    ("distlock.grant_capability(regrole,text,text)",
     "SELECT distlock.grant_capability('distlock_sp_hostile', 'monitor', 'scoped.')"),
    // Fired by every change of role_capabilities.
    ("distlock.role_capabilities_changed()", "SELECT distlock.grant_capability('distlock_sp_hostile', 'monitor')"),
    // Fired by every statement that writes a table.
    ("distlock.library_guard()", "SELECT distlock.grant_capability('distlock_sp_hostile', 'monitor')"),
    // Fired by a TRUNCATE of the queue.
    ("distlock.keep_job_ids_unique()", "TRUNCATE distlock.task_queue"),
    // Fired by a TRUNCATE of the queue or of its archive.
    ("distlock.forget_truncated_attempts()", "TRUNCATE distlock.completed_jobs"),
    // Fired by a change of the lock-key secret, which it refuses.
    ("distlock.refuse_lock_key_secret_change()",
     "DO $$ BEGIN UPDATE distlock.lock_key_secret SET secret = secret; \
      EXCEPTION WHEN object_not_in_prerequisite_state THEN NULL; END $$"),
];

/// On both storage modes: with pg_distlock preloaded (shared memory) and
/// without (tables), since each runs statements the other does not.
#[test]
fn look_alikes_of_everything_the_statements_use_never_run() {
    for (mode, port) in storage_modes() {
        hostile_caller_runs_everything(mode, port);
    }
}

fn hostile_caller_runs_everything(mode: &str, port: u16) {
    let preloaded = port == primary_port();
    let db = fresh_db_on(port, &format!("search_path_hostile_{mode}"));
    let mut c = connect_to(port, &db, "search-path");
    c.batch_execute(&format!(
        "DROP ROLE IF EXISTS {HOSTILE}; CREATE ROLE {HOSTILE}; \
         SELECT distlock.grant_capability('{HOSTILE}', cap) \
           FROM unnest(ARRAY['worker', 'producer', 'consumer', 'monitor', 'admin']) cap; \
         CREATE SCHEMA {HOSTILE} AUTHORIZATION {HOSTILE}; \
         GRANT USAGE ON SCHEMA {HOSTILE} TO PUBLIC;"
    ))
    .expect("setup");

    // Every function of the extension has a call.
    let functions: BTreeSet<String> = rows(
        &mut c,
        "SELECT oid::regprocedure::text FROM pg_proc WHERE pronamespace = 'distlock'::regnamespace",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    let called: BTreeSet<String> = CALLS.iter().chain(OWNER_CALLS).map(|(f, _)| f.to_string()).collect();
    let uncalled: Vec<_> = functions.difference(&called).collect();
    assert!(uncalled.is_empty(), "functions of the extension the test does not call: {uncalled:?}");
    let unknown: Vec<_> = called.difference(&functions).collect();
    assert!(unknown.is_empty(), "calls of functions the extension does not have: {unknown:?}");

    let used = objects_the_statements_use(&mut c);
    assert!(used.iter().any(|u| matches!(u, Used::Operator(_))), "no operators found: the derivation is broken");
    assert!(used.iter().any(|u| matches!(u, Used::Relation(_))), "no relations found: the derivation is broken");

    // The plants, each with a sequence that counts its runs whatever the
    // statement's fate (a sequence ignores rollbacks). Planted by the
    // superuser for brevity: who owns a look-alike does not change which
    // name a statement resolves.
    c.batch_execute(&format!(
        "CREATE FUNCTION {HOSTILE}.hit(n int) RETURNS boolean LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp \
         AS $$ BEGIN PERFORM nextval(format('{HOSTILE}.hit_%s', n)::regclass); RETURN true; END $$;"
    ))
    .expect("hit");
    let mut planted: Vec<Plant> = Vec::new();
    for object in &used {
        if let Some(plant) = plant(&mut c, planted.len(), object) {
            c.batch_execute(&plant.create).unwrap_or_else(|e| panic!("planting {}: {}: {e:?}", plant.what, plant.create));
            planted.push(plant);
        }
    }
    assert!(planted.iter().any(|p| p.what.starts_with("function pg_catalog.")), "no pg_catalog function planted");

    c.batch_execute(&format!("SET search_path = pg_temp, {HOSTILE}, pg_catalog")).expect("hostile search_path");
    // Resolution, whether or not a look-alike would run: each statement,
    // compiled again with the hostile search_path in force, must name
    // exactly the objects it named before (an unqualified name in a branch
    // that the calls below never execute is caught here).
    let resolved_elsewhere = statements_resolved_differently(&mut c);
    c.batch_execute(&format!("SET ROLE {HOSTILE}")).expect("hostile");
    for (function, sql) in CALLS {
        match c.batch_execute(sql) {
            Ok(()) => {}
            // Lock telemetry lives in shared memory only.
            Err(e) if !preloaded && e.code() == Some(&postgres::error::SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE) => {}
            Err(e) => panic!("{mode}: {function}: {sql}: {e:?}"),
        }
    }
    c.batch_execute("RESET ROLE").expect("owner");
    for (function, sql) in OWNER_CALLS {
        c.batch_execute(sql).unwrap_or_else(|e| panic!("{function}: {sql}: {e:?}"));
    }
    // The monitoring views, read by the hostile role.
    c.batch_execute(&format!("SET ROLE {HOSTILE}")).expect("hostile");
    let views: Vec<String> = rows(
        &mut c,
        "SELECT c.oid::pg_catalog.regclass::pg_catalog.text FROM pg_catalog.pg_class c \
          WHERE c.relnamespace OPERATOR(pg_catalog.=) 'distlock'::pg_catalog.regnamespace \
            AND c.relkind OPERATOR(pg_catalog.=) 'v' \
            AND pg_catalog.has_table_privilege(c.oid, 'SELECT')",
    )
    .iter()
    .map(|r| r.get(0))
    .collect();
    assert!(views.len() >= 10, "views: {views:?}");
    for view in &views {
        match c.batch_execute(&format!("SELECT * FROM {view}")) {
            Ok(()) => {}
            Err(e) if !preloaded && e.code() == Some(&postgres::error::SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE) => {}
            Err(e) => panic!("{mode}: {view}: {e:?}"),
        }
    }
    c.batch_execute("RESET ROLE; SET search_path = DEFAULT; DROP SCHEMA probe CASCADE").expect("reset");

    let mut ran = Vec::new();
    for plant in &planted {
        let called: bool = c.query_one(&plant.ran, &[]).unwrap_or_else(|e| panic!("{}: {e:?}", plant.ran)).get(0);
        if called {
            ran.push(plant.what.clone());
        }
    }
    assert!(
        ran.is_empty() && resolved_elsewhere.is_empty(),
        "{mode}: look-alikes on the caller's search_path ran inside pg_distlock: {ran:?}; \
         statements that resolve a name through the caller's search_path: {resolved_elsewhere:?}"
    );
    assert!(planted.len() > 40, "only {} look-alikes were planted", planted.len());
}
