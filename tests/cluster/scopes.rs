//! What is isolated between two roles, and what is not: one test per
//! sentence of docs/privileges.md ("What is isolated between
//! roles"). Roles A and B are scoped to `a.` and `b.`.

use crate::support::*;

/// A database where roles A and B (named after it: roles are cluster-wide
/// and keep grants in older runs' databases) hold `capabilities` scoped to
/// `a.` and `b.`.
pub(crate) fn two_tenants(name: &str, capabilities: &[&str]) -> (Client, String, String) {
    let port = primary_port();
    let db = fresh_db_on(port, name);
    let mut c = connect_to(port, &db, "scopes");
    let (a, b) = (format!("{name}_a"), format!("{name}_b"));
    for (role, scope) in [(&a, "a."), (&b, "b.")] {
        c.batch_execute(&format!("DROP ROLE IF EXISTS {role}; CREATE ROLE {role}")).expect("role");
        for capability in capabilities {
            c.batch_execute(&format!("SELECT distlock.grant_capability('{role}', '{capability}', '{scope}')"))
                .expect("grant");
        }
    }
    (c, a, b)
}

fn allowed(c: &mut Client, role: &str, sql: &str) -> Option<String> {
    as_role(c, role, |c| scalar(c, sql))
}

fn texts(c: &mut Client, sql: &str) -> Vec<String> {
    c.query(sql, &[]).unwrap_or_else(|e| panic!("{sql}: {e:?}")).iter().map(|r| r.get(0)).collect()
}

/// "A scoped worker claims only tasks whose name or type is in its scope:
/// the fetch functions skip the others, and naming one is refused."
#[test]
fn a_scoped_worker_claims_only_tasks_whose_name_or_type_is_in_its_scope() {
    let (mut c, a, b) = two_tenants("scopes_tasks", &["worker"]);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (id, task_name, task_type, next_run_at) VALUES \
           (1, 'a.report', 'etl', '2000-01-01'), (2, 'b.report', 'etl', '2000-01-01'), \
           (3, 'shared', 'a.kind', '2000-01-01'), (4, 'b.other', 'b.kind', '2000-01-01')",
    )
    .expect("tasks");
    let claimed = as_role(&mut c, &a, |c| {
        let mut ids = texts(c, "SELECT task_id::text FROM distlock.try_acquire_multiple_tasks('wa', 10) ORDER BY 1");
        ids.extend(texts(c, "SELECT task_id::text FROM distlock.worker_fetch_and_execute_task('wa', '1 hour') WHERE acquired"));
        ids
    });
    assert_eq!(claimed, ["1", "3"], "A claims its task by name and the one typed a.kind, nothing else");
    for sql in [
        "SELECT distlock.try_acquire_task_lock(2, 'wa')",
        "SELECT distlock.try_acquire_task_lease(4, 'wa', '1 hour')",
    ] {
        refused(&mut c, &a, sql);
    }
    assert_eq!(
        texts(&mut c, "SELECT id::text FROM distlock.scheduled_tasks WHERE current_token IS NOT NULL ORDER BY 1"),
        ["1", "3"],
        "the refused claims took nothing"
    );
    let claimed_by_b = as_role(&mut c, &b, |c| {
        texts(c, "SELECT task_id::text FROM distlock.try_acquire_multiple_tasks('wb', 10) ORDER BY 1")
    });
    assert_eq!(claimed_by_b, ["2", "4"]);
}

/// "... and uses only leases, semaphores, election groups and rate-limit
/// keys in its scope, for status reads (`check_fencing_token`,
/// `check_lease_token`, `try_become_leader`, `rate_limit_status`) as well
/// as for taking and giving back (42501)."
#[test]
fn a_scoped_worker_neither_takes_nor_reads_names_outside_its_scope() {
    let (mut c, a, b) = two_tenants("scopes_names", &["worker"]);
    c.batch_execute("INSERT INTO distlock.scheduled_tasks (id, task_name, task_type) VALUES (2, 'b.report', 'etl')")
        .expect("task");
    let b_token = allowed(&mut c, &b, "SELECT distlock.try_acquire_task_lease(2, 'wb', '1 hour')").expect("b claims");
    let b_lease = allowed(&mut c, &b, "SELECT distlock.acquire_lease('b.lease', 'nb', '1 hour')").expect("b lease");
    allowed(&mut c, &b, "SELECT distlock.acquire_semaphore('b.sem', 2, 'nb', '1 hour')");
    allowed(&mut c, &b, "SELECT is_leader FROM distlock.try_become_leader('b.group', 'nb', '1 hour')");
    allowed(&mut c, &b, "SELECT distlock.check_rate_limit('b.key', 5, 60)");
    for sql in [
        format!("SELECT distlock.check_fencing_token(2, {b_token})"),
        format!("SELECT distlock.check_lease_token('b.lease', {b_lease})"),
        "SELECT distlock.acquire_lease('b.lease', 'na', '1 hour')".into(),
        "SELECT distlock.renew_lease('b.lease', 'nb', '1 hour')".into(),
        "SELECT distlock.release_lease('b.lease', 'nb')".into(),
        "SELECT distlock.acquire_semaphore('b.sem', 2, 'na', '1 hour')".into(),
        "SELECT distlock.release_semaphore('b.sem', 'nb')".into(),
        "SELECT * FROM distlock.try_become_leader('b.group', 'na', '1 hour')".into(),
        "SELECT distlock.resign_leader('b.group', 'nb')".into(),
        "SELECT distlock.check_rate_limit('b.key', 5, 60)".into(),
        "SELECT * FROM distlock.throttle('b.key', 1, 1, 60)".into(),
        "SELECT * FROM distlock.rate_limit_status('b.key')".into(),
    ] {
        refused(&mut c, &a, &sql);
    }
    // The same calls in A's own scope go through.
    assert_eq!(allowed(&mut c, &a, "SELECT distlock.acquire_lease('a.lease', 'na', '1 hour') IS NOT NULL").as_deref(), Some("t"));
    assert_eq!(allowed(&mut c, &a, "SELECT distlock.acquire_semaphore('a.sem', 2, 'na', '1 hour')").as_deref(), Some("t"));
    assert_eq!(allowed(&mut c, &a, "SELECT is_leader FROM distlock.try_become_leader('a.group', 'na', '1 hour')").as_deref(), Some("t"));
    assert_eq!(allowed(&mut c, &a, "SELECT distlock.check_rate_limit('a.key', 5, 60)").as_deref(), Some("t"));
    // B's holds are untouched.
    assert_eq!(
        allowed(&mut c, &b, &format!("SELECT distlock.check_lease_token('b.lease', {b_lease})")).as_deref(),
        Some("t")
    );
    assert_eq!(
        allowed(&mut c, &b, &format!("SELECT distlock.check_fencing_token(2, {b_token})")).as_deref(),
        Some("t")
    );
}

/// "A scoped producer enqueues only job names in its scope, into queues in
/// its scope, and a scoped consumer receives only jobs in its scope, from
/// queues in its scope: naming a queue outside it is refused (`42501`), and
/// NULL means every queue in it."
#[test]
fn scoped_producers_and_consumers_stay_in_their_scope() {
    let (mut c, a, b) = two_tenants("scopes_queue", &["producer", "consumer"]);
    allowed(&mut c, &b, "SELECT distlock.enqueue_task('b.invoice', '{\"secret\": 1}', now() - interval '1 hour', 9, p_queue => 'b.q')");
    allowed(&mut c, &a, "SELECT distlock.enqueue_task('a.mail', '{}', p_queue => 'a.q')");
    refused(&mut c, &a, "SELECT distlock.enqueue_task('b.invoice', '{}', p_queue => 'a.q')");
    // Queues are named by scopes too: the default queue lies outside both.
    refused(&mut c, &a, "SELECT distlock.enqueue_task('a.mail', '{}')");
    refused(&mut c, &a, "SELECT distlock.enqueue_task('a.mail', '{}', p_queue => 'b.q')");
    refused(&mut c, &a, "SELECT * FROM distlock.enqueue_tasks('a.mail', ARRAY['{}'::jsonb], p_queue => 'b.q')");
    refused(&mut c, &a, "SELECT * FROM distlock.consume_task('wa', '1 hour', p_queues => ARRAY['a.q', 'b.q'])");
    refused(&mut c, &a, "SELECT * FROM distlock.settle_and_consume_tasks(1, 'wa', p_queues => ARRAY['default'])");
    // An unscoped producer's job named in A's scope, in B's queue: A's
    // consumers of every queue do not take it (it would hold B's queue).
    c.batch_execute("SELECT distlock.enqueue_task('a.stray', '{}', now() - interval '2 hours', 10, p_queue => 'b.q')")
        .expect("unscoped producer");
    let got = as_role(&mut c, &a, |c| {
        texts(c, "SELECT task_name FROM distlock.consume_tasks(10, 'wa', '1 hour') ORDER BY 1")
    });
    assert_eq!(got, ["a.mail"], "A never receives B's older, higher-priority jobs nor any job of B's queue");
    // Waiting: A's wait ends empty while B's jobs stay pending.
    let waited = as_role(&mut c, &a, |c| {
        texts(c, "SELECT task_name FROM distlock.consume_task('wa', '1 hour', '0.3 seconds')")
    });
    assert!(waited.is_empty(), "A's wait gave it {waited:?}");
    let got_by_b = as_role(&mut c, &b, |c| {
        texts(c, "SELECT task_name || ' ' || payload::text FROM distlock.consume_tasks(10, 'wb', '1 hour', p_queues => ARRAY['b.q'])")
    });
    assert_eq!(got_by_b, ["b.invoice {\"secret\": 1}"], "B takes no job outside its scope, even from its own queue");
}

/// "A queue's limit is held by its own tenant's consumers only": an admin's
/// limit of 1 on B's queue cannot be taken by A, which may neither enqueue
/// into that queue nor claim from it (issue 44, item 7).
#[test]
fn another_tenant_cannot_hold_a_limited_queues_slot() {
    let (mut c, a, b) = two_tenants("scopes_queue_limit", &["producer", "consumer"]);
    c.batch_execute("SELECT distlock.set_queue_limit('b.payments', 1)").expect("limit");
    refused(&mut c, &a, "SELECT distlock.enqueue_task('a.hog', '{}', p_queue => 'b.payments')");
    refused(&mut c, &a, "SELECT * FROM distlock.consume_task('wa', '1 day', p_queues => ARRAY['b.payments'])");
    // Even a job named in A's scope that an unscoped producer put there.
    c.batch_execute("SELECT distlock.enqueue_task('a.hog', '{}', now() - interval '1 hour', 10, p_queue => 'b.payments')")
        .expect("unscoped producer");
    allowed(&mut c, &b, "SELECT distlock.enqueue_task('b.pay', '{}', p_queue => 'b.payments')");
    let got = as_role(&mut c, &a, |c| texts(c, "SELECT task_name FROM distlock.consume_tasks(10, 'wa', '1 day')"));
    assert!(got.is_empty(), "A took {got:?} from B's limited queue");
    let got_by_b =
        as_role(&mut c, &b, |c| texts(c, "SELECT task_name FROM distlock.consume_tasks(10, 'wb', '1 hour', p_queues => ARRAY['b.payments'])"));
    assert_eq!(got_by_b, ["b.pay"], "B's slot was free for B");
}

/// "Scopes are prefixes, so a scope that is a prefix of another covers it:
/// a role scoped to `a.` uses the queues, jobs and names of a role scoped
/// to `a.b.`."
#[test]
fn a_scope_covers_the_scopes_it_is_a_prefix_of() {
    let (mut c, wide, _) = two_tenants("scopes_nested", &["producer", "consumer"]);
    let narrow = "scopes_nested_narrow";
    c.batch_execute(&format!(
        "DROP ROLE IF EXISTS {narrow}; CREATE ROLE {narrow};
         SELECT distlock.grant_capability('{narrow}', c, 'a.b.') FROM unnest(ARRAY['producer', 'consumer']) c"
    ))
    .expect("a narrower tenant");
    allowed(&mut c, narrow, "SELECT distlock.enqueue_task('a.b.job', '{}', p_queue => 'a.b.q')");
    refused(&mut c, narrow, "SELECT distlock.enqueue_task('a.job', '{}', p_queue => 'a.q')");
    let got = as_role(&mut c, &wide, |c| {
        texts(c, "SELECT task_name FROM distlock.consume_tasks(10, 'wide', '1 hour', p_queues => ARRAY['a.b.q'])")
    });
    assert_eq!(got, ["a.b.job"], "the wider scope takes the narrower tenant's job from its queue");
}

/// "A unique key never answers with a job the caller could not see: when
/// the job holding the key is outside the caller's producer scope, the
/// enqueue raises `23505` instead of returning that job's id or dropping
/// the caller's job."
#[test]
fn a_unique_key_never_answers_with_a_job_outside_the_callers_scope() {
    let (mut c, a, _b) = two_tenants("scopes_unique", &["producer"]);
    c.batch_execute("SELECT distlock.enqueue_task('z.order', '{}', p_queue => 'a.q', p_unique_key => 'order:42')")
        .expect("an unscoped producer's job in A's queue");
    let result = as_role(&mut c, &a, |c| {
        c.simple_query("SELECT distlock.enqueue_task('a.order', '{}', p_queue => 'a.q', p_unique_key => 'order:42')")
    });
    let error = result.expect_err("A must not be told of a job it cannot see");
    assert_eq!(error.code().map(|c| c.code()), Some("23505"), "{error:?}");
    assert!(!format!("{error:?}").contains("z.order"), "{error:?}");
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_queue WHERE unique_key = 'order:42'"), 1);
    // A key held by A's own job answers with that job, as before.
    let mine = allowed(&mut c, &a, "SELECT distlock.enqueue_task('a.order', '{}', p_queue => 'a.q', p_unique_key => 'order:43')");
    let again = allowed(&mut c, &a, "SELECT distlock.enqueue_task('a.order', '{}', p_queue => 'a.q', p_unique_key => 'order:43')");
    assert_eq!(mine, again);
}

/// "A scoped monitor sees in the monitoring views only rows named in its
/// scope (a task's name or type, a job name, a lease, semaphore, group or
/// lock name); rows without a name (a plain bigint lock, a wait for one)
/// are hidden from it."
#[test]
fn a_scoped_monitor_sees_only_rows_named_in_its_scope() {
    let (mut c, a, b) = two_tenants("scopes_monitor", &["worker", "producer", "monitor"]);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (id, task_name, task_type, next_run_at) VALUES \
           (1, 'a.report', 'etl', '2000-01-01'), (2, 'b.report', 'etl', '2000-01-01')",
    )
    .expect("tasks");
    let db = "scopes_monitor";
    let mut holder_b = connect_to(primary_port(), db, "holder-b");
    holder_b
        .batch_execute(&format!(
            "SET ROLE {b}; SELECT * FROM distlock.worker_fetch_and_execute_task('wb'); \
             SELECT distlock.lock('b.lock'); SELECT distlock.lock(424242::bigint); \
             SELECT distlock.acquire_lease('b.lease', 'nb', '1 hour'); \
             SELECT distlock.try_become_leader('b.group', 'nb', '1 hour'); \
             SELECT distlock.enqueue_task('b.job', '{{}}', p_queue => 'b.jobs')"
        ))
        .expect("b's state");
    let mut holder_a = connect_to(primary_port(), db, "holder-a");
    holder_a
        .batch_execute(&format!(
            "SET ROLE {a}; SELECT * FROM distlock.worker_fetch_and_execute_task('wa'); \
             SELECT distlock.lock('a.lock'); \
             SELECT distlock.acquire_lease('a.lease', 'na', '1 hour'); \
             SELECT distlock.try_become_leader('a.group', 'na', '1 hour'); \
             SELECT distlock.enqueue_task('a.job', '{{}}', p_queue => 'a.jobs')"
        ))
        .expect("a's state");
    // B also waits for A's lock: a wait A's monitor may see.
    let waiter_db = db.to_string();
    let waiter = std::thread::spawn(move || {
        let mut w = connect_to(primary_port(), &waiter_db, "waiter-b");
        w.batch_execute(&format!("SET ROLE {b}; SELECT distlock.lock(424242::bigint, '3 seconds')")).ok();
    });
    eventually("the waiter waits", std::time::Duration::from_secs(10), || {
        count(&mut c, "SELECT 1 FROM pg_stat_activity WHERE application_name = 'waiter-b' AND wait_event_type = 'Lock'") == 1
    });
    let views = [
        ("distlock.running_tasks", "task_name"),
        ("distlock.task_stats", "task_name"),
        ("distlock.advisory_locks", "coalesce(task_name, key_name, key::text, key1::text)"),
        ("distlock.leases", "name"),
        ("distlock.leaders", "group_name"),
        ("distlock.queue_stats", "task_name"),
        ("distlock.lock_stats", "coalesce(name, key::text)"),
    ];
    for (view, column) in views {
        let sql = format!("SELECT {column} FROM {view} ORDER BY 1");
        let seen_by_a = as_role(&mut c, &a, |c| texts(c, &sql));
        assert!(!seen_by_a.is_empty(), "{view}: A sees none of its own rows");
        assert!(seen_by_a.iter().all(|name| name.starts_with("a.")), "{view}: A sees {seen_by_a:?}");
        let seen_by_owner = texts(&mut c, &sql);
        assert!(seen_by_owner.iter().any(|name| !name.starts_with("a.")), "{view}: the owner sees all: {seen_by_owner:?}");
    }
    let waits_seen_by_a = as_role(&mut c, &a, |c| count(c, "SELECT * FROM distlock.lock_waits"));
    assert_eq!(waits_seen_by_a, 0, "a wait for a bigint lock is hidden from a scoped monitor");
    assert_eq!(count(&mut c, "SELECT * FROM distlock.lock_waits"), 1, "and shown to the owner");
    holder_b.batch_execute("SELECT distlock.unlock_all()").expect("unlock");
    waiter.join().expect("waiter");
}

/// "A role's scope is the union of the scopes of the roles whose
/// privileges it has; an unscoped grant among them, or admin, means every
/// name. A change reaches running sessions at their next statement."
#[test]
fn scopes_follow_membership_and_changes_reach_running_sessions() {
    let (mut c, a, b) = two_tenants("scopes_changes", &["worker"]);
    let mut session = connect_to(primary_port(), "scopes_changes", "tenant-a");
    session.batch_execute(&format!("SET ROLE {a}")).expect("set role");
    let lease = |s: &mut Client, name: &str| {
        s.simple_query(&format!("SELECT distlock.acquire_lease('{name}', 'na', '1 hour')")).map(|_| ())
    };
    lease(&mut session, "a.x").expect("in scope");
    assert_eq!(sqlstate(lease(&mut session, "b.x")), "42501");

    c.batch_execute(&format!("SELECT distlock.grant_capability('{a}', 'worker', 'b.')")).expect("rescope");
    assert_eq!(sqlstate(lease(&mut session, "a.y")), "42501", "the new scope replaces the old one");
    lease(&mut session, "b.y").expect("the new scope");

    // A member of B: the union of both scopes.
    c.batch_execute(&format!("SELECT distlock.grant_capability('{a}', 'worker', 'a.'); GRANT {b} TO {a}"))
        .expect("member");
    lease(&mut session, "a.z").expect("its own scope");
    assert_eq!(sqlstate(lease(&mut session, "c.z")), "42501");
    c.batch_execute(&format!("SELECT distlock.grant_capability('{b}', 'worker')")).expect("b unscoped");
    lease(&mut session, "c.z").expect("B's unscoped grant reaches its member");
    c.batch_execute(&format!("REVOKE {b} FROM {a}")).expect("not a member");
    assert_eq!(sqlstate(lease(&mut session, "c.w")), "42501", "membership gone, scope back");

    c.batch_execute(&format!("SELECT distlock.grant_capability('{a}', 'admin')")).expect("admin");
    lease(&mut session, "c.w").expect("an admin's scope is every name");
    c.batch_execute(&format!("SELECT distlock.revoke_capability('{a}', 'admin')")).expect("no admin");
    assert_eq!(sqlstate(lease(&mut session, "c.v")), "42501", "revoking admin keeps the worker scope");
    assert_eq!(
        scalar(&mut c, &format!("SELECT scope FROM distlock.role_capabilities WHERE role = '{a}'::regrole AND capability = 'worker'"))
            .as_deref(),
        Some("a."),
    );
    for (scope, capability) in [("''", "worker"), ("'x'", "admin")] {
        let result = c.simple_query(&format!("SELECT distlock.grant_capability('{a}', '{capability}', {scope})"));
        assert_eq!(sqlstate(result), "22023", "scope {scope} for {capability}");
    }
}

/// "Without scopes, names are one namespace per database: any consumer
/// receives any producer's job, payload included; any worker may claim any
/// task; the status functions answer about any name."
#[test]
fn without_scopes_names_are_one_namespace() {
    let (mut c, a, b) = two_tenants("scopes_none", &[]);
    for role in [&a, &b] {
        c.batch_execute(&format!(
            "SELECT distlock.grant_capability('{role}', cap) FROM unnest(ARRAY['worker', 'producer', 'consumer']) cap"
        ))
        .expect("unscoped");
    }
    c.batch_execute("INSERT INTO distlock.scheduled_tasks (id, task_name, task_type) VALUES (1, 'a.report', 'etl')")
        .expect("task");
    allowed(&mut c, &a, "SELECT distlock.enqueue_task('a.invoice', '{\"secret\": 1}')");
    let got = as_role(&mut c, &b, |c| texts(c, "SELECT payload::text FROM distlock.consume_tasks(10, 'wb', '1 hour')"));
    assert_eq!(got, ["{\"secret\": 1}"], "B receives A's job and its payload");
    assert_eq!(allowed(&mut c, &b, "SELECT distlock.try_acquire_task_lock(1, 'wb')").as_deref(), Some("t"));
    allowed(&mut c, &a, "SELECT is_leader FROM distlock.try_become_leader('a.group', 'node-of-a', '1 hour')");
    assert_eq!(
        allowed(&mut c, &b, "SELECT leader FROM distlock.try_become_leader('a.group', 'nb', '1 hour')").as_deref(),
        Some("node-of-a"),
        "B learns who leads A's group"
    );
}

/// "A semaphore's limit is one value for all its holders: while slots are
/// held, a call with another limit is refused (22023)."
#[test]
fn a_semaphore_has_one_limit_for_every_role() {
    let (mut c, a, b) = two_tenants("scopes_semaphore", &[]);
    for role in [&a, &b] {
        c.batch_execute(&format!("SELECT distlock.grant_capability('{role}', 'worker')")).expect("worker");
    }
    assert_eq!(allowed(&mut c, &a, "SELECT distlock.acquire_semaphore('s', 1, 'na', '1 hour')").as_deref(), Some("t"));
    let result = as_role(&mut c, &b, |c| c.simple_query("SELECT distlock.acquire_semaphore('s', 1000, 'nb', '1 hour')"));
    assert_eq!(sqlstate(result), "22023");
    assert_eq!(allowed(&mut c, &b, "SELECT distlock.acquire_semaphore('s', 1, 'nb', '1 hour')").as_deref(), Some("f"));
}

/// "Leases, semaphore slots and leaderships last at most
/// `distlock.max_hold_ttl` (one day unless a superuser sets it; 22023
/// above), so no role keeps a name from another for longer."
#[test]
fn no_role_holds_a_name_longer_than_max_hold_ttl() {
    let (mut c, a, b) = two_tenants("scopes_ttl", &[]);
    for role in [&a, &b] {
        c.batch_execute(&format!("SELECT distlock.grant_capability('{role}', 'worker')")).expect("worker");
    }
    for sql in [
        "SELECT distlock.acquire_lease('x', 'na', '1 day 1 second')",
        "SELECT distlock.acquire_semaphore('x', 1, 'na', '1 day 1 second')",
        "SELECT * FROM distlock.try_become_leader('x', 'na', '1 day 1 second')",
    ] {
        let result = as_role(&mut c, &a, |c| c.simple_query(sql));
        assert_eq!(sqlstate(result), "22023", "{sql}");
    }
    c.batch_execute("SET distlock.max_hold_ttl = '1s'").expect("superuser sets it");
    allowed(&mut c, &a, "SELECT distlock.acquire_lease('x', 'na', '1 second')");
    let taken = |c: &mut Client| {
        as_role(c, &b, |c| scalar(c, "SELECT distlock.acquire_lease('x', 'nb', '1 second') IS NOT NULL")).as_deref()
            == Some("t")
    };
    assert!(!taken(&mut c), "A holds it");
    eventually("B takes the name once A's lease ran out", std::time::Duration::from_secs(5), || taken(&mut c));
}

/// "Not isolated even with scopes: advisory locks (`lock`, `try_lock`: a
/// bigint key carries no name, so no scope can cover it)."
#[test]
fn advisory_locks_are_not_scoped() {
    let (mut c, a, b) = two_tenants("scopes_locks", &["worker"]);
    assert_eq!(allowed(&mut c, &a, "SELECT distlock.try_lock('b.lock')").as_deref(), Some("t"));
    let mut other = connect_to(primary_port(), "scopes_locks", "tenant-b");
    other.batch_execute(&format!("SET ROLE {b}")).expect("role");
    assert_eq!(scalar(&mut other, "SELECT distlock.try_lock('b.lock')").as_deref(), Some("f"), "A holds B's name");
}

/// "... A change reaches running sessions": also the first scoped grant of
/// a database, which ends the unscoped fast path of sessions that have
/// already looked.
#[test]
fn the_first_scoped_grant_reaches_running_sessions() {
    let (mut c, a, _) = two_tenants("scopes_first", &[]);
    c.batch_execute(&format!("SELECT distlock.grant_capability('{a}', 'worker')")).expect("unscoped");
    let mut session = connect_to(primary_port(), "scopes_first", "tenant-a");
    session.batch_execute(&format!("SET ROLE {a}")).expect("set role");
    let limited = |s: &mut Client, key: &str| {
        s.simple_query(&format!("SELECT distlock.check_rate_limit('{key}', 5, 60)")).map(|_| ())
    };
    limited(&mut session, "b.key").expect("no scope anywhere yet");
    c.batch_execute(&format!("SELECT distlock.grant_capability('{a}', 'worker', 'a.')")).expect("scoped");
    assert_eq!(sqlstate(limited(&mut session, "b.key")), "42501");
    limited(&mut session, "a.key").expect("in scope");
    c.batch_execute(&format!("SELECT distlock.grant_capability('{a}', 'worker')")).expect("unscoped again");
    limited(&mut session, "b.key").expect("no scope anywhere again");
}

/// "A scoped monitor cannot read past a view's scope with a function of its
/// own": every view that filters by scope is a security barrier, so a cheap
/// leaky function that A plants in pg_temp (TEMP is PUBLIC) and puts in its
/// WHERE clause only ever sees A's rows (issue 44, item 3).
#[test]
fn a_scoped_monitors_own_function_sees_no_row_outside_its_scope() {
    let (mut c, a, b) = two_tenants("scopes_barrier", &["worker", "producer", "monitor"]);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (id, task_name, task_type, next_run_at) VALUES \
           (1, 'a.report', 'etl', '2000-01-01'), (2, 'b.report', 'etl', '2000-01-01')",
    )
    .expect("tasks");
    let db = "scopes_barrier";
    let mut holders = Vec::new();
    for (role, tenant) in [(&a, "a"), (&b, "b")] {
        let mut h = connect_to(primary_port(), db, &format!("holder-{tenant}"));
        h.batch_execute(&format!(
            "SET ROLE {role}; SELECT * FROM distlock.worker_fetch_and_execute_task('w{tenant}'); \
             SELECT distlock.lock('{tenant}.lock'); \
             SELECT distlock.acquire_lease('{tenant}.lease', 'n{tenant}', '1 hour'); \
             SELECT distlock.try_become_leader('{tenant}.group', 'n{tenant}', '1 hour'); \
             SELECT distlock.enqueue_task('{tenant}.job', '{{}}', p_queue => '{tenant}.jobs')"
        ))
        .expect("tenant state");
        holders.push(h);
    }
    // A's own connection, collecting the NOTICEs its function raises.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = seen.clone();
    let mut spy = postgres::Config::new()
        .host("127.0.0.1")
        .port(primary_port())
        .user("postgres")
        .dbname(db)
        .notice_callback(move |notice| sink.lock().expect("notices").push(notice.message().to_string()))
        .connect(NoTls)
        .expect("connect");
    spy.batch_execute(&format!(
        "SET ROLE {a}; \
         CREATE FUNCTION pg_temp.peek(text) RETURNS boolean LANGUAGE plpgsql COST 0.0000001 \
           AS $$ BEGIN RAISE NOTICE 'peek:%', $1; RETURN true; END $$;"
    ))
    .expect("A plants its function");
    let views = [
        ("distlock.running_tasks", "task_name"),
        ("distlock.task_stats", "task_name"),
        ("distlock.task_schedule", "task_name"),
        ("distlock.blocked_tasks", "task_name"),
        ("distlock.advisory_locks", "coalesce(task_name, key_name)"),
        ("distlock.leases", "name"),
        ("distlock.leaders", "group_name"),
        ("distlock.queue_stats", "task_name"),
        ("distlock.queues", "name"),
        ("distlock.lock_stats", "name"),
        ("distlock.lock_key_collisions", "names::text"),
    ];
    for (view, column) in views {
        seen.lock().expect("notices").clear();
        spy.batch_execute(&format!("SELECT * FROM {view} WHERE pg_temp.peek(({column})::text)"))
            .unwrap_or_else(|e| panic!("{view}: {e}"));
        let leaked: Vec<String> = seen
            .lock()
            .expect("notices")
            .iter()
            .filter_map(|m| m.strip_prefix("peek:").map(str::to_string))
            .filter(|name| !name.starts_with("a."))
            .collect();
        assert!(leaked.is_empty(), "{view} ran A's function on rows outside A's scope: {leaked:?}");
    }
    // The planted function still ran on A's own rows: the check could see a leak.
    seen.lock().expect("notices").clear();
    spy.batch_execute("SELECT * FROM distlock.leases WHERE pg_temp.peek(name)").expect("leases");
    assert!(seen.lock().expect("notices").iter().any(|m| m == "peek:a.lease"), "A's function saw A's lease");
    for mut h in holders {
        h.batch_execute("SELECT distlock.unlock_all()").expect("unlock");
    }
}

/// "A refusal names ids, not names outside the caller's scope; settling or
/// extending a job outside the caller's scope answers exactly as an unknown
/// id; lock telemetry shows a scoped monitor only keys of names in its
/// scope" (issue 44, items 8, 9 and 10).
#[test]
fn nothing_outside_a_scope_is_told_by_refusals_settles_or_telemetry() {
    let (mut c, a, b) = two_tenants("scopes_oracles", &["worker", "producer", "consumer", "monitor"]);
    c.batch_execute(
        "INSERT INTO distlock.scheduled_tasks (id, task_name, task_type, next_run_at) VALUES \
           (4, 'b.payroll-bonus', 'etl', '2000-01-01')",
    )
    .expect("task");
    // Item 8: the refusal names the id only.
    let refusal = as_role(&mut c, &a, |c| c.batch_execute("SELECT distlock.try_acquire_task_lock(4, 'wa')"))
        .expect_err("refused");
    let message = refusal.as_db_error().map(|e| format!("{} {:?} {:?}", e.message(), e.detail(), e.hint()));
    let message = message.expect("a server error");
    assert!(message.contains("task 4"), "{message}");
    assert!(!message.contains("payroll"), "the refusal names B's task: {message}");

    // Item 10: B's job, held by B, is to A exactly an unknown id.
    let job = allowed(&mut c, &b, "SELECT distlock.enqueue_task('b.job', '{}', p_queue => 'b.jobs')").expect("b's job");
    allowed(&mut c, &b, "SELECT task_id FROM distlock.consume_task('wb', '1 hour')").expect("b holds its job");
    let unknown = "987654321";
    for template in [
        "SELECT distlock.complete_task(JOB, 'wb')",
        "SELECT distlock.fail_task(JOB, 'x', 'wb')",
        "SELECT distlock.extend_task_lease(JOB, '1 minute', 'wb')",
        "SELECT distlock.complete_task(JOB)",
    ] {
        let answers: Vec<(String, String)> = [job.as_str(), unknown]
            .iter()
            .map(|id| {
                let sql = template.replace("JOB", id);
                let result = as_role(&mut c, &a, |c| c.batch_execute(&sql));
                let error = result.expect_err("refused");
                let db = error.as_db_error().expect("a server error");
                (db.code().code().to_string(), db.message().replace(id, "N"))
            })
            .collect();
        assert_eq!(answers[0], answers[1], "{template}: B's job and an unknown id answer differently");
        assert_eq!(answers[0].0, "P0002", "{template}");
    }
    assert_eq!(
        scalar(&mut c, &format!("SELECT status FROM distlock.jobs WHERE id = {job}")),
        Some("processing".into()),
        "A's attempts changed nothing"
    );

    // Item 9: telemetry of B's named lock and of an unnamed key is hidden from A.
    if std::env::var("DISTLOCK_TEST_SHARED_MEMORY").is_ok() {
        c.batch_execute(&format!(
            "SET ROLE {b}; SELECT distlock.lock('b.secret'); SELECT distlock.unlock('b.secret'); RESET ROLE; \
             SET ROLE {a}; SELECT distlock.lock('a.mine'); SELECT distlock.unlock('a.mine'); RESET ROLE; \
             SELECT distlock.lock(515151::bigint); SELECT distlock.unlock(515151::bigint);"
        ))
        .expect("telemetry");
        let keys_seen_by_a = as_role(&mut c, &a, |c| texts(c, "SELECT key::text FROM distlock.lock_stats_entries() ORDER BY 1"));
        let mine = texts(&mut c, "SELECT distlock.lock_id('a.mine')::text");
        assert_eq!(keys_seen_by_a, mine, "A sees telemetry of its own key only");
        assert_eq!(count(&mut c, "SELECT 1 FROM distlock.lock_stats_entries()"), 3, "the owner sees every key");
    }
}
