//! Leases, semaphores, elections and the job queue through a
//! transaction-pooling PgBouncer: many clients share 4 server connections,
//! so consecutive statements of one client run on different backends.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

fn pooled(db: &str, application_name: &str) -> Client {
    connect_to(pooler_port(), db, application_name)
}

/// Runs `clients` pooled clients for `run_for`; each repeatedly tries to take
/// the resource with `acquire` and, when it did, records its holding period
/// in `holds` (between acquire and release), then releases with `release`.
fn contend(db: &str, clients: usize, run_for: Duration, acquire: &'static str, release: &'static str) {
    connect(db)
        .batch_execute("CREATE TABLE holds (owner text, token bigint, started timestamptz, ended timestamptz)")
        .expect("holds table");
    let until = Instant::now() + run_for;
    let workers: Vec<_> = (0..clients)
        .map(|i| {
            let db = db.to_string();
            thread::spawn(move || {
                let owner = format!("client-{i}");
                let mut c = pooled(&db, &owner);
                while Instant::now() < until {
                    let got = scalar(&mut c, &acquire.replace("$owner", &owner));
                    let Some(token) = got.filter(|t| t != "f") else {
                        thread::sleep(Duration::from_millis(2)); // back off before trying again
                        continue;
                    };
                    let token = if token == "t" { "NULL".to_string() } else { token };
                    c.batch_execute(&format!(
                        "INSERT INTO holds VALUES ('{owner}', {token}, clock_timestamp(), NULL)"
                    ))
                    .expect("record start");
                    thread::sleep(Duration::from_millis(3)); // the protected work
                    c.batch_execute(&format!(
                        "UPDATE holds SET ended = clock_timestamp() WHERE owner = '{owner}' AND ended IS NULL"
                    ))
                    .expect("record end");
                    c.batch_execute(&release.replace("$owner", &owner)).expect("release");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("client");
    }
}

/// The most holding periods in `holds` that overlap at one instant.
fn max_overlap(c: &mut Client) -> i64 {
    c.query_one(
        "SELECT COALESCE(max(holding), 0) FROM ( \
           SELECT sum(delta) OVER (ORDER BY at, delta) AS holding FROM ( \
             SELECT started AS at, 1 AS delta FROM holds UNION ALL SELECT ended, -1 FROM holds) e) s",
        &[],
    )
    .expect("overlap")
    .get(0)
}

#[test]
fn a_lease_has_one_owner_at_a_time_and_tokens_increase() {
    let db = fresh_db("pooler_lease");
    contend(
        &db,
        40,
        Duration::from_secs(3),
        "SELECT distlock.acquire_lease('nightly-job', '$owner', '5 seconds')",
        "SELECT distlock.release_lease('nightly-job', '$owner')",
    );
    let mut c = connect(&db);
    let holds = count(&mut c, "SELECT 1 FROM holds");
    assert!(holds >= 20, "the lease changed hands many times ({holds})");
    assert_eq!(max_overlap(&mut c), 1, "never two owners at once");
    assert_eq!(
        count(&mut c, "SELECT 1 FROM (SELECT token, lag(token) OVER (ORDER BY started) AS prev FROM holds) s WHERE token <= prev"),
        0,
        "each new owner got a higher token"
    );
}

#[test]
fn a_semaphore_has_at_most_max_holders() {
    let db = fresh_db("pooler_semaphore");
    contend(
        &db,
        30,
        Duration::from_secs(3),
        "SELECT distlock.acquire_semaphore('export-slots', 3, '$owner', '5 seconds')",
        "SELECT distlock.release_semaphore('export-slots', '$owner')",
    );
    let mut c = connect(&db);
    let overlap = max_overlap(&mut c);
    assert!((2..=3).contains(&overlap), "at most 3 holders at once, and more than one ({overlap})");
}

#[test]
fn a_stale_lease_owner_is_fenced_out_after_expiry() {
    let db = fresh_db("pooler_fencing");
    let mut setup = connect(&db);
    setup
        .batch_execute(
            "CREATE TABLE reports (body text, token bigint); \
             CREATE FUNCTION fence() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
               IF NOT distlock.check_lease_token('report-writer', NEW.token) THEN \
                 RAISE EXCEPTION 'stale token %', NEW.token USING ERRCODE = '40001'; END IF; \
               RETURN NEW; END $$; \
             CREATE TRIGGER fence BEFORE INSERT ON reports FOR EACH ROW EXECUTE FUNCTION fence();",
        )
        .expect("fenced table");
    let mut old = pooled(&db, "old-owner");
    let mut new = pooled(&db, "new-owner");
    let t1: i64 = scalar(&mut old, "SELECT distlock.acquire_lease('report-writer', 'old', '300 ms')")
        .expect("token")
        .parse()
        .expect("bigint");
    old.batch_execute(&format!("INSERT INTO reports VALUES ('from old', {t1})")).expect("old writes while it holds");
    eventually("the old lease to expire", Duration::from_secs(5), || {
        scalar(&mut new, "SELECT distlock.acquire_lease('report-writer', 'new', '1 minute')").is_some()
    });
    let t2: i64 = scalar(&mut new, "SELECT token FROM distlock.leases WHERE name = 'report-writer'")
        .expect("token")
        .parse()
        .expect("bigint");
    assert!(t2 > t1);
    assert_eq!(sqlstate(old.batch_execute(&format!("INSERT INTO reports VALUES ('late', {t1})"))), "40001");
    assert_eq!(scalar(&mut old, "SELECT distlock.renew_lease('report-writer', 'old', '1 minute')").as_deref(), Some("f"));
    assert_eq!(scalar(&mut old, "SELECT distlock.release_lease('report-writer', 'old')").as_deref(), Some("f"));
    new.batch_execute(&format!("INSERT INTO reports VALUES ('from new', {t2})")).expect("new writes");
    assert_eq!(count(&mut setup, "SELECT 1 FROM reports"), 2);
}

#[test]
fn elections_have_one_leader_per_term_and_terms_increase() {
    let db = fresh_db("pooler_election");
    connect(&db)
        .batch_execute("CREATE TABLE observed (node text, term bigint, at timestamptz)")
        .expect("observations");
    let until = Instant::now() + Duration::from_secs(3);
    let nodes: Vec<_> = (0..10)
        .map(|i| {
            let db = db.clone();
            thread::spawn(move || {
                let node = format!("node-{i}");
                let mut c = pooled(&db, &node);
                let mut terms_led = 0;
                while Instant::now() < until {
                    let led = scalar(
                        &mut c,
                        &format!(
                            "WITH r AS (SELECT * FROM distlock.try_become_leader('scheduler', '{node}', '200 ms')) \
                             INSERT INTO observed SELECT '{node}', term, clock_timestamp() FROM r WHERE is_leader \
                             RETURNING term"
                        ),
                    );
                    if led.is_some() {
                        terms_led += 1;
                        if terms_led % 5 == 0 {
                            c.batch_execute(&format!("SELECT distlock.resign_leader('scheduler', '{node}')")).expect("resign");
                        }
                    }
                    thread::sleep(Duration::from_millis(5));
                }
            })
        })
        .collect();
    for n in nodes {
        n.join().expect("node");
    }
    let mut c = connect(&db);
    assert!(count(&mut c, "SELECT DISTINCT term FROM observed") >= 3, "leadership changed hands");
    assert_eq!(count(&mut c, "SELECT term FROM observed GROUP BY term HAVING count(DISTINCT node) > 1"), 0, "one leader per term");
    assert_eq!(
        count(&mut c, "SELECT 1 FROM (SELECT term, lag(term) OVER (ORDER BY at) AS prev FROM observed) s WHERE term < prev"),
        0,
        "terms never go back"
    );
}

#[test]
fn the_job_queue_works_through_pgbouncer() {
    let db = fresh_db("pooler_queue");
    connect(&db)
        .batch_execute("CREATE TABLE done (job bigint); SELECT distlock.enqueue_task('mail') FROM generate_series(1, 300);")
        .expect("jobs");
    let consumers: Vec<_> = (0..12)
        .map(|i| {
            let db = db.clone();
            thread::spawn(move || {
                let worker = format!("mailer-{i}");
                let mut c = pooled(&db, &worker);
                while let Some(job) = scalar(&mut c, &format!("SELECT task_id FROM distlock.consume_task('{worker}')")) {
                    // Result and completion in one transaction, as docs/queue.md advises.
                    c.batch_execute(&format!(
                        "BEGIN; INSERT INTO done VALUES ({job}); \
                         DO $$ BEGIN IF NOT distlock.complete_task({job}, '{worker}') THEN RAISE EXCEPTION 'lost'; END IF; END $$; \
                         COMMIT;"
                    ))
                    .expect("complete");
                }
            })
        })
        .collect();
    for c in consumers {
        c.join().expect("consumer");
    }
    let mut c = connect(&db);
    assert_eq!(count(&mut c, "SELECT DISTINCT job FROM done"), 300);
    assert_eq!(count(&mut c, "SELECT 1 FROM done"), 300);
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.jobs WHERE status = 'completed'"), 300);
}

/// Transaction-level lock calls are safe behind the pooler: the lock ends
/// with the transaction, on whichever server connection ran it. A
/// read-then-write counter loses updates unless the lock serializes it.
#[test]
fn transaction_level_lock_calls_serialize_through_pgbouncer() {
    let db = fresh_db("pooler_xact_lock");
    connect(&db).batch_execute("CREATE TABLE counter (n int); INSERT INTO counter VALUES (0)").expect("counter");
    let (clients, rounds) = (12, 15);
    let workers: Vec<_> = (0..clients)
        .map(|i| {
            let db = db.to_string();
            thread::spawn(move || {
                let mut client = pooled(&db, &format!("xact-lock-{i}"));
                for _ in 0..rounds {
                    let got = scalar(
                        &mut client,
                        "BEGIN; SELECT distlock.lock('counter', '30 s', p_xact => true)",
                    );
                    assert_eq!(got.as_deref(), Some("t"));
                    client
                        .batch_execute("SELECT pg_sleep(0.002); UPDATE counter SET n = (SELECT n FROM counter) + 1; COMMIT")
                        .expect("update under the lock");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("client");
    }
    let mut c = connect(&db);
    let n: i32 = c.query_one("SELECT n FROM counter", &[]).expect("n").get(0);
    assert_eq!(n, clients * rounds, "no lost update");
    assert_eq!(
        count(&mut c, "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 \
                       AND ((classid::bigint << 32) | objid::bigint) = distlock.lock_id('counter')"),
        0,
        "nothing left held on the pooled server connections"
    );
}

/// Lease-mode task claims behind the pooler: each statement of a worker may
/// run on a different server connection, and the claim still belongs to the
/// worker (by its token). Every due task runs exactly once; the heartbeat
/// and the release usually land on other backends than the claim.
#[test]
fn lease_mode_task_claims_run_each_task_once_through_pgbouncer() {
    let db = fresh_db("pooler_task_lease");
    connect(&db)
        .batch_execute(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
               SELECT 'task-' || i, 'report', '0 0 1 1 *', now() FROM generate_series(1, 60) i; \
             CREATE TABLE runs (task_id int PRIMARY KEY, token bigint, backends int[]);",
        )
        .expect("tasks");
    let workers: Vec<_> = (0..12)
        .map(|i| {
            let db = db.clone();
            thread::spawn(move || {
                let worker = format!("pooled-worker-{i}");
                let mut c = pooled(&db, &worker);
                // Simple queries only: the pooler cannot keep prepared statements.
                loop {
                    let claimed = scalar(
                        &mut c,
                        &format!(
                            "SELECT format('%s %s %s', task_id, fencing_token, pg_backend_pid()) \
                               FROM distlock.worker_fetch_and_execute_task('{worker}', '1 minute') WHERE acquired"
                        ),
                    );
                    let Some(claimed) = claimed else { break };
                    let [task_id, token, claimed_on]: [&str; 3] =
                        claimed.split(' ').collect::<Vec<_>>().try_into().expect("three fields");
                    let renewed_on = scalar(
                        &mut c,
                        &format!("SELECT pg_backend_pid() FROM distlock.renew_task_lease({task_id}, {token}, '1 minute')"),
                    )
                    .expect("heartbeat");
                    c.batch_execute(&format!(
                        "INSERT INTO runs VALUES ({task_id}, {token}, ARRAY[{claimed_on}, {renewed_on}, pg_backend_pid()])"
                    ))
                    .expect("one run per task");
                    c.batch_execute(&format!("SELECT distlock.release_task_lease({task_id}, {token}, 'completed')"))
                        .expect("release");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    let mut c = connect(&db);
    assert_eq!(count(&mut c, "SELECT 1 FROM runs"), 60);
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'completed'"), 60);
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status <> 'completed'"), 0);
    assert!(
        count(&mut c, "SELECT 1 FROM runs WHERE backends[1] <> backends[2] OR backends[2] <> backends[3]") > 0,
        "some claims were renewed or recorded on another server connection"
    );
}
