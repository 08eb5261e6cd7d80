//! Queue, rate limiter, snowflake IDs and optimistic locking under many
//! connections, in both storage modes where they have two.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::support::*;

#[test]
fn snowflake_one_million_ids_from_8_connections_are_unique_and_increasing() {
    for (mode, port) in storage_modes() {
        let db = fresh_db_on(port, "features_snowflake");
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let db = db.clone();
                thread::spawn(move || {
                    let mut c = connect_to(port, &db, "snowflake");
                    let mut ids: Vec<i64> = Vec::with_capacity(125_000);
                    for _ in 0..25 {
                        let batch: Vec<i64> = c
                            .query_one(
                                "SELECT array_agg(id ORDER BY g) FROM (SELECT g, distlock.generate_snowflake_id(5) AS id \
                                 FROM generate_series(1, 5000) g) s",
                                &[],
                            )
                            .expect("batch")
                            .get(0);
                        ids.extend(batch);
                    }
                    ids
                })
            })
            .collect();
        let mut all = HashSet::with_capacity(1_000_000);
        for w in workers {
            let ids = w.join().expect("generator");
            assert!(ids.windows(2).all(|p| p[0] < p[1]), "{mode}: IDs increase strictly per connection");
            assert!(ids.iter().all(|id| (id >> 12) & 1023 == 5), "{mode}: worker id 5 in every ID");
            all.extend(ids);
        }
        assert_eq!(all.len(), 1_000_000, "{mode}: one million distinct IDs");
        let max_id = *all.iter().max().expect("ids");
        let mark = if mode == "memory" {
            persisted_snowflake_mark(5)
        } else {
            let mut c = connect_to(port, &db, "check");
            c.query_one("SELECT last_ms FROM distlock.id_generator WHERE worker_id = 5", &[]).expect("mark").get(0)
        };
        assert!(mark >= (max_id >> 22) + 1_609_459_200_000, "{mode}: the persisted mark covers every ID");
    }
}

#[test]
fn snowflake_ids_keep_increasing_across_a_crash_restart() {
    let db = fresh_db("features_snowflake_restart");
    let before: i64 = connect(&db)
        .query_one("SELECT max(distlock.generate_snowflake_id(77)) FROM generate_series(1, 10000)", &[])
        .expect("before")
        .get(0);
    let first_after: i64 = crash_restart_primary(&db)
        .query_one("SELECT distlock.generate_snowflake_id(77)", &[])
        .expect("after")
        .get(0);
    assert!(first_after > before, "{first_after} <= {before}");
}

#[test]
fn rate_limit_admits_exactly_max_per_window_under_8_connections() {
    for (mode, port) in storage_modes() {
        let db = fresh_db_on(port, "features_rate");
        let workers: Vec<_> = (0..8)
            .map(|_| {
                let db = db.clone();
                thread::spawn(move || {
                    let mut c = connect_to(port, &db, "limiter");
                    let mut fixed = 0;
                    let mut gcra = 0;
                    for _ in 0..60 {
                        if c.query_one("SELECT distlock.check_rate_limit('hot', 100, 3600)", &[]).expect("check").get::<_, bool>(0) {
                            fixed += 1;
                        }
                        if c.query_one("SELECT allowed FROM distlock.throttle('hot', 49, 1, 3600)", &[]).expect("throttle").get::<_, bool>(0) {
                            gcra += 1;
                        }
                    }
                    (fixed, gcra)
                })
            })
            .collect();
        let (fixed, gcra) = workers
            .into_iter()
            .map(|w| w.join().expect("limiter"))
            .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
        assert_eq!(fixed, 100, "{mode}: fixed window admits exactly 100 of 480");
        assert_eq!(gcra, 50, "{mode}: GCRA admits exactly the burst of 50 of 480");
        let count: i32 = connect_to(port, &db, "status")
            .query_one("SELECT request_count FROM distlock.rate_limit_status('hot')", &[])
            .expect("status")
            .get(0);
        assert_eq!(count, 100, "{mode}");
    }
}

#[test]
fn rate_limit_memory_table_reuses_expired_slots_and_refuses_when_full() {
    // The primary runs with distlock.rate_limit_capacity = 64.
    let db = fresh_db("features_rate_full");
    let mut c = connect(&db);
    let mut refused = None;
    for i in 0..400 {
        if let Err(e) = c.query_one("SELECT distlock.check_rate_limit($1, 1, 1)", &[&format!("short-{i}")]) {
            refused = Some((i, e));
            break;
        }
    }
    // 64 slots in 16 partitions: some partition fills before 400 live keys fit.
    let (refused_at, error) = refused.expect("a 64-slot table cannot hold 400 live keys");
    assert_eq!(error.code().map(|c| c.code()), Some("53000"), "{error}");
    assert!(format!("{error:?}").contains("distlock.rate_limit_capacity"), "{error:?}");
    // Once those one-second windows are over, their slots take new keys:
    // the refused key now fits in its (formerly full) partition.
    thread::sleep(Duration::from_millis(1100)); // letting windows expire is the behaviour under test
    let admitted: bool = c
        .query_one("SELECT distlock.check_rate_limit($1, 1, 1)", &[&format!("short-{refused_at}")])
        .expect("expired slots are reused")
        .get(0);
    assert!(admitted);
}

/// Consumers are killed mid-job; with leases, every job still completes
/// exactly once (a result is only kept when complete_task returns true in
/// the same transaction).
/// A throttle call that meets the sweep deleting its key's expired state
/// still records its request. The interleaving is forced with a row lock:
/// a pinning transaction holds the row, the sweep's delete queues on it,
/// then the throttle call queues behind the sweep.
#[test]
fn table_mode_gcra_keeps_a_request_that_races_the_sweeps_prune() {
    let port = plain_port();
    let db = fresh_db_on(port, "features_gcra_prune");
    let mut pin = connect_to(port, &db, "pin");
    pin.batch_execute("INSERT INTO distlock.rate_limit_gcra (key, tat) VALUES ('raced', now() - interval '1 hour')")
        .expect("expired state");
    pin.batch_execute("BEGIN; SELECT 1 FROM distlock.rate_limit_gcra WHERE key = 'raced' FOR UPDATE")
        .expect("pinned");
    let mut monitor = connect_to(port, &db, "monitor");
    let mut waits_on_a_lock = |who: &str| {
        count(
            &mut monitor,
            &format!("SELECT 1 FROM pg_stat_activity WHERE application_name = '{who}' AND wait_event_type = 'Lock'"),
        ) == 1
    };
    let in_session = |who: &'static str, sql: &'static str| {
        let db = db.clone();
        thread::spawn(move || connect_to(port, &db, who).query_one(sql, &[]).map(|row| row.get::<_, bool>(0)))
    };
    let sweep = in_session("sweeper", "SELECT count(*) >= 0 FROM distlock.check_and_recover_timeout_tasks()");
    eventually("the sweep's prune to queue on the row", Duration::from_secs(10), || waits_on_a_lock("sweeper"));
    // No burst, one request per hour: this call is admitted, and any other
    // within the hour must be refused.
    let call = in_session("caller", "SELECT allowed FROM distlock.throttle('raced', 0, 1, 3600)");
    eventually("the throttle call to queue behind the sweep", Duration::from_secs(10), || waits_on_a_lock("caller"));
    pin.batch_execute("COMMIT").expect("unpin");
    assert_eq!(sweep.join().expect("sweeper").expect("sweep"), true);
    assert_eq!(call.join().expect("caller").expect("throttle"), true, "the raced call is admitted");
    let again: bool = pin
        .query_one("SELECT allowed FROM distlock.throttle('raced', 0, 1, 3600)", &[])
        .expect("throttle")
        .get(0);
    assert!(!again, "the raced request was recorded, so the next one within the hour is refused");
}

/// One job per transaction, hand-written: claim, then the job's effect and
/// its completion in one transaction.
#[test]
fn queue_processes_every_job_exactly_once_while_consumers_are_killed() {
    every_job_once_while_consumers_are_killed("features_queue", |c, worker, _held| {
        let rows = c.query("SELECT task_id FROM distlock.consume_task($1, '1 second')", &[&worker])?;
        let Some(row) = rows.first() else { return Ok(false) };
        let job: i64 = row.get(0);
        let mut tx = c.transaction()?;
        tx.execute("INSERT INTO results VALUES ($1, $2)", &[&job, &worker])?;
        tx.execute("SELECT pg_sleep(0.002)", &[])?; // the job's work
        let done: bool = tx.query_one("SELECT distlock.complete_task($1, $2)", &[&job, &worker])?.get(0);
        if done { tx.commit()? } else { tx.rollback()? }
        Ok(true)
    });
}

/// One commit per batch with settle_and_consume_tasks: the effects of the
/// jobs held, their completion and the next claim in one transaction. A
/// refused settle (a lease lost) rolls the transaction back, effects
/// included; a kill mid-batch leaves the batch's jobs to be claimed again.
#[test]
fn queue_fused_settle_and_claim_processes_every_job_exactly_once_while_consumers_are_killed() {
    every_job_once_while_consumers_are_killed("features_queue_fused", |c, worker, held| {
        let mut tx = c.transaction()?;
        for (job, _) in held.iter() {
            tx.execute("INSERT INTO results VALUES ($1, $2)", &[job, &worker])?;
        }
        tx.execute("SELECT pg_sleep(0.002)", &[])?; // the batch's work
        let ids: Vec<i64> = held.iter().map(|(id, _)| *id).collect();
        let attempts: Vec<i32> = held.iter().map(|(_, attempt)| *attempt).collect();
        let rows = tx.query(
            "SELECT task_id, attempts, outcome FROM distlock.settle_and_consume_tasks(4, $1, $2, $3, p_lease => '1 second')",
            &[&worker, &ids, &attempts],
        )?;
        held.clear();
        if rows.iter().any(|row| row.get::<_, String>(2) == "refused") {
            tx.rollback()?;
            return Ok(true);
        }
        tx.commit()?;
        held.extend(rows.iter().map(|row| (row.get::<_, i64>(0), row.get::<_, i32>(1))));
        Ok(!ids.is_empty() || !held.is_empty())
    });
}

/// Eight consumers run `step` (true: it did something; false: idle) on
/// 1500 jobs while a killer terminates consumers in the middle of their
/// transactions; a killed consumer reconnects holding nothing. Every job's
/// effect (a row of `results`) is kept exactly once.
fn every_job_once_while_consumers_are_killed(
    name: &str,
    step: fn(&mut postgres::Client, &str, &mut Vec<(i64, i32)>) -> Result<bool, postgres::Error>,
) {
    let db = fresh_db(name);
    let mut setup = connect(&db);
    setup
        .batch_execute(
            "CREATE TABLE results (job_id bigint, worker text); \
             SELECT distlock.enqueue_task('resize', jsonb_build_object('n', g)) FROM generate_series(1, 1500) g;",
        )
        .expect("jobs");
    let stop = Arc::new(AtomicBool::new(false));
    let consumers: Vec<_> = (0..8)
        .map(|w| {
            let db = db.clone();
            let stop = stop.clone();
            thread::spawn(move || {
                let worker = format!("consumer-{w}");
                let mut reconnects = 0;
                while !stop.load(Ordering::Relaxed) {
                    let mut c = connect_to(primary_port(), &db, &worker);
                    let mut held: Vec<(i64, i32)> = Vec::new();
                    loop {
                        if stop.load(Ordering::Relaxed) {
                            return reconnects;
                        }
                        match step(&mut c, &worker, &mut held) {
                            Ok(true) => {}
                            Ok(false) => thread::sleep(Duration::from_millis(20)), // idle poll
                            Err(_) => break, // killed: reconnect
                        }
                    }
                    reconnects += 1;
                }
                reconnects
            })
        })
        .collect();
    let mut killer = connect(&db);
    let mut kills = 0;
    for _ in 0..30 {
        thread::sleep(Duration::from_millis(30));
        let killed: i64 = killer
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity \
                 WHERE datname = current_database() AND application_name LIKE 'consumer-%' \
                   AND state = 'idle in transaction' ORDER BY random() LIMIT 1) victims",
                &[],
            )
            .expect("kill")
            .get(0);
        kills += killed;
    }
    eventually("every job to complete", Duration::from_secs(60), || {
        count(&mut killer, "SELECT 1 FROM distlock.jobs WHERE status <> 'completed'") == 0
    });
    stop.store(true, Ordering::Relaxed);
    let reconnects: i32 = consumers.into_iter().map(|c| c.join().expect("consumer")).sum();
    assert!(kills > 0 && reconnects > 0, "consumers were killed mid-job ({kills} kills)");
    assert_eq!(count(&mut killer, "SELECT DISTINCT job_id FROM results"), 1500);
    assert_eq!(count(&mut killer, "SELECT 1 FROM results"), 1500, "no job's result was kept twice");
    assert!(
        count(&mut killer, "SELECT 1 FROM distlock.jobs WHERE attempts > 1") > 0,
        "killed consumers' jobs were claimed again after their lease"
    );
}

#[test]
fn bump_version_rejects_a_lost_update_between_two_sessions() {
    let db = fresh_db("features_version");
    let mut alice = connect(&db);
    let mut bob = connect(&db);
    alice
        .batch_execute(
            "CREATE TABLE accounts (id int PRIMARY KEY, balance int, version int NOT NULL DEFAULT 1); \
             INSERT INTO accounts VALUES (1, 100, 1); \
             CREATE TRIGGER v BEFORE UPDATE ON accounts FOR EACH ROW EXECUTE FUNCTION distlock.bump_version();",
        )
        .expect("table");
    let read_by_alice: i32 = alice.query_one("SELECT version FROM accounts WHERE id = 1", &[]).expect("read").get(0);
    let read_by_bob: i32 = bob.query_one("SELECT version FROM accounts WHERE id = 1", &[]).expect("read").get(0);
    alice
        .execute("UPDATE accounts SET balance = balance - 30, version = $1 WHERE id = 1", &[&read_by_alice])
        .expect("alice wins");
    let lost = bob.execute("UPDATE accounts SET balance = balance - 50, version = $1 WHERE id = 1", &[&read_by_bob]);
    assert_eq!(sqlstate(lost), "40001");
    let (balance, version): (i32, i32) = {
        let row = bob.query_one("SELECT balance, version FROM accounts WHERE id = 1", &[]).expect("row");
        (row.get(0), row.get(1))
    };
    assert_eq!((balance, version), (70, 2));
}

/// Puts a server setting back when the test ends, pass or fail.
struct SystemSetting {
    port: u16,
    db: String,
    name: &'static str,
}

impl Drop for SystemSetting {
    fn drop(&mut self) {
        let mut admin = connect_to(self.port, &self.db, "cluster-test");
        // ALTER SYSTEM knows a library's settings only once it is loaded.
        let _ = admin.batch_execute("SELECT distlock.lock_id('load the library')");
        // ALTER SYSTEM refuses to run in a multi-statement batch.
        let _ = admin.batch_execute(&format!("ALTER SYSTEM RESET {}", self.name));
        let _ = admin.batch_execute("SELECT pg_reload_conf()");
    }
}

#[test]
fn snowflake_epoch_out_of_range_is_refused_not_overflowed() {
    let port = plain_port();
    let db = fresh_db_on(port, "sf_epoch_range");
    let _reset = SystemSetting { port, db: db.clone(), name: "distlock.snowflake_epoch" };
    let mut admin = connect_to(port, &db, "cluster-test");
    admin.batch_execute("SELECT distlock.lock_id('load the library')").expect("load");
    admin.batch_execute("ALTER SYSTEM SET distlock.snowflake_epoch = '9223372036854775807'").expect("set epoch");
    admin.batch_execute("SELECT pg_reload_conf()").expect("reload");
    eventually("the bad epoch to be refused with 22023", Duration::from_secs(10), || {
        let mut c = connect_to(port, &db, "cluster-test");
        match c.query_one("SELECT distlock.snowflake_timestamp(1)", &[]) {
            Ok(_) => false, // the reload has not reached new sessions yet
            Err(e) => {
                assert_eq!(e.code().map(|c| c.code()), Some("22023"), "{e}");
                true
            }
        }
    });
}
