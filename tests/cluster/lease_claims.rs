//! Lease-mode task claims: held as the task row's lease, renewed and
//! released by token from any connection, superseded once the lease runs
//! out, and never overlapping a session claim.

use std::time::Duration;

use crate::support::*;

fn tasks(db: &str, n: i32, extra: &str) {
    connect(db)
        .batch_execute(&format!(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at{}) \
             SELECT 'task-' || i, 'report', '0 0 1 1 *', now(){} FROM generate_series(1, {n}) i",
            if extra.is_empty() { "" } else { ", timeout" },
            if extra.is_empty() { String::new() } else { format!(", '{extra}'") },
        ))
        .expect("tasks");
}

fn lease_claim(c: &mut Client, task_id: i32, worker: &str, lease: &str) -> Option<i64> {
    c.query_one(
        "SELECT distlock.try_acquire_task_lease($1, $2, $3::text::interval)",
        &[&task_id, &worker, &lease],
    )
    .expect("lease claim")
    .get(0)
}

fn status_of(c: &mut Client, token: i64) -> String {
    scalar(c, &format!("SELECT status FROM distlock.task_execution_log WHERE fencing_token = {token}"))
        .expect("a log row for the token")
}

#[test]
fn a_lease_claim_is_renewed_and_released_from_other_connections() {
    let db = fresh_db("lease_claim_connections");
    tasks(&db, 1, "");
    let mut claimer = connect(&db);
    let token = lease_claim(&mut claimer, 1, "w1", "30 seconds").expect("claimed");
    drop(claimer); // the claim outlives the connection that made it
    let mut heartbeat = connect(&db);
    let renewed: bool = heartbeat
        .query_one(
            "SELECT distlock.renew_task_lease(1, $1, '10 minutes') > now() + interval '5 minutes'",
            &[&token],
        )
        .expect("renew")
        .get(0);
    assert!(renewed, "the lease now ends about 10 minutes from now");
    assert!(
        heartbeat.query_one("SELECT distlock.check_fencing_token(1, $1)", &[&token]).expect("check").get::<_, bool>(0)
    );
    assert_eq!(
        count(&mut heartbeat, "SELECT 1 FROM distlock.running_tasks WHERE holder_alive AND holder_pid IS NULL"),
        1,
        "shown as a live claim with no holder backend"
    );
    let mut finisher = connect(&db);
    finisher
        .execute("SELECT distlock.release_task_lease(1, $1, 'completed')", &[&token])
        .expect("release from a third connection");
    assert_eq!(status_of(&mut finisher, token), "completed");
    assert_eq!(
        count(&mut finisher, "SELECT 1 FROM distlock.scheduled_tasks WHERE next_run_at > now() + interval '1 day' AND current_token IS NULL AND lease_expires_at IS NULL"),
        1,
        "the task moved on to its next slot"
    );
    let again = finisher.execute("SELECT distlock.release_task_lease(1, $1, 'completed')", &[&token]);
    assert_eq!(sqlstate(again), "55000");
    let renew = finisher.execute("SELECT distlock.renew_task_lease(1, $1, '1 minute')", &[&token]);
    assert_eq!(sqlstate(renew), "55000");
    let unknown = finisher.execute("SELECT distlock.release_task_lease(99, $1, 'completed')", &[&token]);
    assert_eq!(sqlstate(unknown), "P0002");
}

#[test]
fn an_expired_lease_is_taken_over_and_its_holder_fenced_out() {
    let db = fresh_db("lease_claim_takeover");
    tasks(&db, 1, "");
    let mut setup = connect(&db);
    setup
        .batch_execute(
            "CREATE TABLE reports (token bigint); \
             CREATE FUNCTION fence() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF NOT distlock.check_fencing_token(1, NEW.token) THEN \
                 RAISE EXCEPTION 'stale token %', NEW.token USING ERRCODE = '40001'; END IF; \
               RETURN NEW; END $$; \
             CREATE TRIGGER fence BEFORE INSERT ON reports FOR EACH ROW EXECUTE FUNCTION fence();",
        )
        .expect("fenced table");
    let mut old = connect(&db);
    let old_token = old
        .query_one("SELECT fencing_token FROM distlock.worker_fetch_and_execute_task('old', '300 ms')", &[])
        .expect("fetch")
        .get::<_, Option<i64>>(0)
        .expect("claimed");
    let mut new = connect(&db);
    assert_eq!(lease_claim(&mut new, 1, "new", "1 minute"), None, "not while the lease lasts");
    let new_token = eventually_claimed(
        &mut new,
        "the lease to run out and be taken over",
        Duration::from_secs(5),
        "SELECT fencing_token FROM distlock.worker_fetch_and_execute_task('new', '1 minute')",
    );
    assert!(new_token > old_token);
    assert_eq!(status_of(&mut setup, old_token), "abandoned", "the superseded run is closed by the next claim");
    // The old holder wakes up: everything it tries is refused.
    assert_eq!(sqlstate(old.execute("INSERT INTO reports VALUES ($1)", &[&old_token])), "40001");
    assert_eq!(sqlstate(old.execute("SELECT distlock.renew_task_lease(1, $1, '1 minute')", &[&old_token])), "55000");
    assert_eq!(
        sqlstate(old.execute("SELECT distlock.release_task_lease(1, $1, 'completed')", &[&old_token])),
        "55000"
    );
    new.execute("INSERT INTO reports VALUES ($1)", &[&new_token]).expect("the new holder writes");
    new.execute("SELECT distlock.release_task_lease(1, $1, 'completed')", &[&new_token]).expect("release");
    assert_eq!(count(&mut setup, "SELECT 1 FROM reports"), 1);
    assert_eq!(count(&mut setup, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'completed'"), 1);
}

#[test]
fn lease_claims_and_session_claims_exclude_each_other() {
    let db = fresh_db("lease_claim_modes");
    tasks(&db, 1, "");
    let mut session = connect(&db);
    let mut leaser = connect(&db);
    let claim_session = |c: &mut Client| -> bool {
        c.query_one("SELECT distlock.try_acquire_task_lock(1, 'session')", &[]).expect("claim").get(0)
    };
    assert!(claim_session(&mut session));
    assert_eq!(lease_claim(&mut leaser, 1, "leaser", "1 minute"), None, "a live session claim holds the task");
    session.execute("SELECT distlock.release_task_lock(1, 'session', 'completed')", &[]).expect("release");

    let token = lease_claim(&mut leaser, 1, "leaser", "300 ms").expect("free again");
    assert!(!claim_session(&mut session), "a live lease holds the task");
    eventually("a session claim to take over the expired lease", Duration::from_secs(5), || claim_session(&mut session));
    assert_eq!(sqlstate(leaser.execute("SELECT distlock.release_task_lease(1, $1, 'completed')", &[&token])), "55000");

    // A session claim whose holder is gone is superseded by a lease claim at once.
    let pid = backend_pid(&mut session);
    connect(&db).execute("SELECT pg_terminate_backend($1, 5000)", &[&pid]).expect("terminate");
    let mut superseding = None;
    eventually("the dead holder's lock to go", Duration::from_secs(5), || {
        superseding = lease_claim(&mut leaser, 1, "leaser", "1 minute");
        superseding.is_some()
    });
    let mut c = connect(&db);
    assert_eq!(
        count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE worker_id = 'session' AND status = 'running'"),
        0,
        "the dead session's run was closed by the lease claim"
    );
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'abandoned'"), 2);
}

#[test]
fn the_sweep_abandons_expired_leases_and_times_out_overdue_ones() {
    let db = fresh_db("lease_claim_sweep");
    tasks(&db, 2, "1 second");
    let mut worker = connect(&db);
    let expiring = lease_claim(&mut worker, 1, "w", "200 ms").expect("task 1");
    let overdue = lease_claim(&mut worker, 2, "w", "1 hour").expect("task 2");
    let mut admin = connect(&db);
    let mut recovered: Vec<(i32, bool)> = Vec::new();
    eventually("the sweep to recover both claims", Duration::from_secs(10), || {
        recovered.extend(
            admin
                .query("SELECT task_id, lock_released FROM distlock.check_and_recover_timeout_tasks()", &[])
                .expect("sweep")
                .iter()
                .map(|r| (r.get(0), r.get(1))),
        );
        recovered.len() >= 2
    });
    recovered.sort();
    assert_eq!(recovered, vec![(1, true), (2, true)]);
    assert_eq!(status_of(&mut admin, expiring), "abandoned");
    assert_eq!(status_of(&mut admin, overdue), "timed_out");
    assert_eq!(
        count(&mut admin, "SELECT 1 FROM distlock.scheduled_tasks WHERE id = 1 AND next_run_at <= now()"),
        1,
        "an abandoned slot stays due"
    );
    assert_eq!(
        sqlstate(worker.execute("SELECT distlock.renew_task_lease(2, $1, '1 hour')", &[&overdue])),
        "55000",
        "a timed-out claim's lease is revoked"
    );
}

fn runs_abandoned(c: &mut Client, task_id: i32) -> i64 {
    scalar(c, &format!("SELECT runs_abandoned FROM distlock.task_schedule WHERE task_id = {task_id}"))
        .expect("counter")
        .parse()
        .expect("a number")
}

/// A worker killed with its lease-mode claim (kill -9 of its client): the
/// claim that takes the task over once the lease ran out counts the run as
/// abandoned, as the sweep's recovery does, so the documented alert on
/// abandoned runs (docs/metrics.md) fires for crashed workers too.
#[test]
fn a_crashed_workers_run_counts_as_abandoned_whether_taken_over_or_swept() {
    let db = fresh_db("lease_claim_crash_counted");
    tasks(&db, 2, "");
    let mut observer = connect(&db);
    for task_id in [1, 2] {
        let mut client = std::process::Command::new(pg_bin("psql"))
            .args(["-X", "-q", "-At", "-h", "127.0.0.1", "-p", &primary_port().to_string(), "-U", "postgres", "-d", &db])
            // Two commands, two transactions: the claim commits, then the worker "works".
            .args(["-c", &format!("SELECT distlock.try_acquire_task_lease({task_id}, 'doomed', '1 second')")])
            .args(["-c", "SELECT pg_sleep(60)"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("psql");
        eventually("the doomed worker to claim", Duration::from_secs(10), || {
            count(&mut observer, &format!("SELECT 1 FROM distlock.running_tasks WHERE task_id = {task_id} AND worker_id = 'doomed'"))
                == 1
        });
        client.kill().expect("kill -9");
        client.wait().expect("reaped");
    }
    eventually("both leases to run out", Duration::from_secs(5), || {
        count(&mut observer, "SELECT 1 FROM distlock.running_tasks WHERE NOT holder_alive") == 2
    });
    // Task 1: taken over by the next worker's claim.
    assert!(lease_claim(&mut observer, 1, "next", "1 minute").is_some(), "taken over");
    assert_eq!(runs_abandoned(&mut observer, 1), 1, "the takeover counts the crashed run");
    // Task 2: nobody claims it; the sweep recovers it.
    observer.batch_execute("SELECT * FROM distlock.check_and_recover_timeout_tasks()").expect("sweep");
    assert_eq!(runs_abandoned(&mut observer, 2), 1, "the sweep counts the crashed run");
    assert_eq!(count(&mut observer, "SELECT 1 FROM distlock.task_execution_log WHERE worker_id = 'doomed' AND status = 'abandoned'"), 2);
}

/// A session claim whose holder lost its lock (a pooler's DISCARD ALL) and
/// that another claim replaced is ended as abandoned by the sweep: counted,
/// though the task row, which the live claim owns, is otherwise untouched.
#[test]
fn a_replaced_session_claim_ended_by_the_sweep_counts_as_abandoned() {
    let db = fresh_db("lease_claim_replaced_counted");
    tasks(&db, 1, "");
    let mut holder = connect(&db);
    let mut second = connect(&db);
    crate::fencing_identity::claim(&mut holder, 1, "holder");
    holder.batch_execute("DISCARD ALL").expect("the pooler resets the session");
    let live = crate::fencing_identity::claim(&mut second, 1, "second");
    let before = scalar(&mut second, "SELECT row(last_status, current_token)::text FROM distlock.scheduled_tasks WHERE id = 1");
    second.batch_execute("SELECT * FROM distlock.check_and_recover_timeout_tasks()").expect("sweep");
    assert_eq!(count(&mut second, "SELECT 1 FROM distlock.task_execution_log WHERE worker_id = 'holder' AND status = 'abandoned'"), 1);
    assert_eq!(runs_abandoned(&mut second, 1), 1);
    assert_eq!(
        scalar(&mut second, "SELECT row(last_status, current_token)::text FROM distlock.scheduled_tasks WHERE id = 1"),
        before,
        "the live claim's state is left alone"
    );
    assert!(crate::fencing_identity::valid(&mut second, 1, live));
}

/// `running_tasks.lease_backend_alive` of task `task_id`'s running claim,
/// as `role` reads it (NULL as "null").
fn lease_backend_alive(c: &mut Client, role: &str, task_id: i32) -> String {
    as_role(c, role, |c| {
        scalar(
            c,
            &format!("SELECT coalesce(lease_backend_alive::text, 'null') FROM distlock.running_tasks WHERE task_id = {task_id}"),
        )
        .expect("a running claim")
    })
}

/// The pid of the session whose application_name is `name`, once connected.
fn pid_of(c: &mut Client, name: &str) -> i32 {
    let mut pid = None;
    eventually(&format!("session {name} to connect"), Duration::from_secs(10), || {
        pid = scalar(c, &format!("SELECT pid FROM pg_stat_activity WHERE application_name = '{name}'"))
            .and_then(|p| p.parse().ok());
        pid.is_some()
    });
    pid.expect("pid")
}

fn gone(c: &mut Client, pid: i32) -> bool {
    count(c, &format!("SELECT 1 FROM pg_stat_activity WHERE pid = {pid}")) == 0
}

/// A worker killed with its lease-mode claim (kill -9 of its client) shows
/// as such while its lease runs on: running_tasks says the backend that made
/// the claim is gone, to a monitor that may not read other roles'
/// backend_start as to a superuser, while holder_alive (the lease) stays
/// true. A renewal from another connection makes that connection the claim's
/// backend. Before, only the lease's expiry told a crashed worker.
#[test]
fn a_killed_lease_workers_backend_shows_gone_while_its_lease_runs_on() {
    let db = fresh_db("lease_backend_gone");
    tasks(&db, 2, "");
    let mut observer = connect(&db);
    observer
        .batch_execute(
            "DROP ROLE IF EXISTS lease_gone_worker; CREATE ROLE lease_gone_worker LOGIN; \
             DROP ROLE IF EXISTS lease_gone_monitor; CREATE ROLE lease_gone_monitor; \
             SELECT distlock.grant_capability('lease_gone_worker', 'worker'); \
             SELECT distlock.grant_capability('lease_gone_monitor', 'monitor'); \
             DROP ROLE IF EXISTS lease_gone_stranger; CREATE ROLE lease_gone_stranger; \
             SELECT distlock.grant_capability('lease_gone_stranger', 'monitor', 'other.')",
        )
        .expect("roles");
    let mut worker = std::process::Command::new(pg_bin("psql"))
        .args(["-X", "-q", "-At", "-h", "127.0.0.1", "-p", &primary_port().to_string(), "-U", "lease_gone_worker", "-d", &db])
        .env("PGAPPNAME", "lease-gone-worker")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("psql");
    // The claim commits; then the worker works with its connection idle, as
    // a worker between calls does (its backend sees the connection close).
    let mut commands = worker.stdin.take().expect("stdin");
    std::io::Write::write_all(&mut commands, b"SELECT distlock.try_acquire_task_lease(1, 'doomed', '10 minutes');\n")
        .expect("claim sent");
    eventually("the worker to claim", Duration::from_secs(10), || {
        count(&mut observer, "SELECT 1 FROM distlock.running_tasks WHERE task_id = 1") == 1
    });
    let worker_pid = pid_of(&mut observer, "lease-gone-worker");
    for role in ["postgres", "lease_gone_monitor"] {
        assert_eq!(lease_backend_alive(&mut observer, role, 1), "true", "{role} sees the live worker");
    }
    // A monitor whose scope leaves the task out learns nothing of it.
    assert_eq!(
        as_role(&mut observer, "lease_gone_stranger", |c| scalar(
            c,
            "SELECT row(distlock.lease_backend_connected(1), distlock.lease_backend_alive(1), \
                        (SELECT count(*) FROM distlock.running_tasks))::text"
        ))
        .as_deref(),
        Some("(,,0)")
    );
    worker.kill().expect("kill -9");
    worker.wait().expect("reaped");
    drop(commands);
    eventually("the killed worker's backend to exit", Duration::from_secs(10), || gone(&mut observer, worker_pid));
    for role in ["postgres", "lease_gone_monitor"] {
        assert_eq!(lease_backend_alive(&mut observer, role, 1), "false", "{role} sees the worker gone");
    }
    assert_eq!(
        scalar(&mut observer, "SELECT holder_alive::text FROM distlock.running_tasks WHERE task_id = 1").as_deref(),
        Some("true"),
        "the lease itself runs on"
    );

    // Claimed on one connection, renewed on another: the renewing one counts.
    let mut claimer = connect_to(primary_port(), &db, "lease-claimer");
    let token = lease_claim(&mut claimer, 2, "moving", "10 minutes").expect("claimed");
    let claimer_pid = backend_pid(&mut claimer);
    let mut renewer = connect_to(primary_port(), &db, "lease-renewer");
    renewer
        .execute("SELECT distlock.renew_task_lease(2, $1, '10 minutes')", &[&token])
        .expect("renewed from another connection");
    let renewer_pid = backend_pid(&mut renewer);
    drop(claimer);
    eventually("the claiming connection to close", Duration::from_secs(10), || gone(&mut observer, claimer_pid));
    assert_eq!(lease_backend_alive(&mut observer, "lease_gone_monitor", 2), "true", "the renewing backend lives");
    drop(renewer);
    eventually("the renewing connection to close", Duration::from_secs(10), || gone(&mut observer, renewer_pid));
    assert_eq!(lease_backend_alive(&mut observer, "lease_gone_monitor", 2), "false");

}

/// A standby does not guess: the backends recorded in replicated rows are
/// the primary's.
#[test]
fn a_standby_answers_null_for_whether_a_lease_backend_is_connected() {
    let db = fresh_db("lease_backend_standby");
    tasks(&db, 1, "");
    let mut holder = connect(&db);
    lease_claim(&mut holder, 1, "alive", "10 minutes").expect("claimed");
    assert_eq!(lease_backend_alive(&mut holder, "postgres", 1), "true", "the primary knows its backend");
    let mut standby = standby_showing(
        &db,
        "the standby to replay the claim",
        "SELECT count(*) FROM distlock.running_tasks WHERE task_id = 1",
    );
    assert_eq!(lease_backend_alive(&mut standby, "postgres", 1), "null");
    assert_eq!(
        scalar(&mut standby, "SELECT row(distlock.lease_backend_connected(1), distlock.lease_backend_alive(1))::text").as_deref(),
        Some("(,)")
    );
}

/// (Review.) A monitor reading inside a transaction (READ COMMITTED, as a dashboard or
/// an exporter that batches its reads does) sees the claim of a worker that
/// connected after the transaction first read the backend table (any read of
/// pg_stat_activity, or of running_tasks itself) — the claim's row is read
/// fresh, but the backend table is PostgreSQL's per-transaction snapshot, in
/// which the live worker's backend is missing. lease_backend_alive then says
/// false ("lease live, connection gone") for a worker that is alive and
/// connected; it should not affirm "gone" for a backend younger than its
/// snapshot.
#[test]
fn a_worker_that_connected_after_a_monitors_transaction_began_reads_alive_in_it() {
    let db = fresh_db("lease_backend_snapshot");
    connect(&db)
        .batch_execute(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) VALUES ('snap-1', 'x', now())",
        )
        .expect("task");
    let mut monitor = connect_to(primary_port(), &db, "lease-snapshot-monitor");
    monitor
        .batch_execute("BEGIN; SELECT count(*) FROM pg_catalog.pg_stat_activity")
        .expect("a monitor's transaction reads the backend table");
    let mut worker = connect_to(primary_port(), &db, "lease-snapshot-worker");
    let token: Option<i64> = worker
        .query_one("SELECT distlock.try_acquire_task_lease(1, 'live', '10 minutes')", &[])
        .expect("claim")
        .get(0);
    assert!(token.is_some(), "claimed");
    let worker_pid = backend_pid(&mut worker);
    let seen = scalar(
        &mut monitor,
        "SELECT row(holder_alive, coalesce(lease_backend_alive::text, 'null'))::text \
           FROM distlock.running_tasks WHERE task_id = 1",
    );
    monitor.batch_execute("COMMIT").expect("commit");
    // The worker is connected and holds its claim throughout.
    assert_eq!(count(&mut monitor, &format!("SELECT 1 FROM pg_stat_activity WHERE pid = {worker_pid}")), 1);
    assert_eq!(
        seen.as_deref(),
        Some("(t,true)"),
        "a live, connected worker (pid {worker_pid}) read as 'lease live, connection gone'"
    );
    drop(worker);
}

/// A backend is alive for a task's claim only in the task's own database: a
/// copy of the database (pg_dump and restore into the same server, or a
/// template copy) carries the recorded backend of a worker connected to the
/// original, which must not read as the copy's.
#[test]
fn a_backend_recorded_in_another_database_reads_gone() {
    let original = fresh_db("lease_backend_original");
    let copy = fresh_db("lease_backend_copy");
    tasks(&original, 1, "");
    tasks(&copy, 1, "");
    let mut worker = connect(&original);
    lease_claim(&mut worker, 1, "original", "10 minutes").expect("claimed");
    assert_eq!(lease_backend_alive(&mut worker, "postgres", 1), "true");
    let recorded = scalar(
        &mut worker,
        "SELECT format('%s, %L', lease_backend_pid, lease_backend_start) FROM distlock.scheduled_tasks WHERE id = 1",
    )
    .expect("recorded");
    let mut c = connect(&copy);
    c.batch_execute(&format!(
        "UPDATE distlock.scheduled_tasks SET lease_expires_at = now() + interval '10 minutes', \
                (lease_backend_pid, lease_backend_start) = ({recorded}) WHERE id = 1"
    ))
    .expect("the copy's row names the original's worker");
    assert_eq!(scalar(&mut c, "SELECT distlock.lease_backend_connected(1)::text").as_deref(), Some("false"));
}
