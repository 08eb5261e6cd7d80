//! Dead, hung and restarted holders are recovered by the sweep.

use std::time::Duration;

use crate::support::*;

fn one_task(db: &str, extra: &str) {
    connect(db)
        .batch_execute(&format!(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at) \
             VALUES ('job', 'etl', '@daily', now()); {extra}"
        ))
        .expect("task");
}

fn claim_one(client: &mut Client, worker: &str) -> Option<i32> {
    let row = client
        .query_one("SELECT task_id, acquired FROM distlock.worker_fetch_and_execute_task($1)", &[&worker])
        .expect("fetch");
    row.get::<_, bool>(1).then(|| row.get(0))
}

fn sweep(client: &mut Client) -> Vec<(i32, String, bool)> {
    client
        .query("SELECT task_id, worker_id, lock_released FROM distlock.check_and_recover_timeout_tasks()", &[])
        .expect("sweep")
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

fn backend_gone(client: &mut Client, pid: i32) -> bool {
    count(client, &format!("SELECT 1 FROM pg_stat_activity WHERE pid = {pid}")) == 0
}

#[test]
fn killed_worker_is_abandoned_and_the_task_claimed_again() {
    let db = fresh_db("recovery_killed");
    one_task(&db, "");
    let mut doomed = connect(&db);
    let doomed_pid = backend_pid(&mut doomed);
    assert_eq!(claim_one(&mut doomed, "doomed"), Some(1));

    let mut other = connect(&db);
    // While the holder lives, the sweep leaves the claim alone.
    assert!(sweep(&mut other).is_empty());
    assert_eq!(claim_one(&mut other, "other"), None);

    other.execute("SELECT pg_terminate_backend($1, 5000)", &[&doomed_pid]).expect("kill");
    eventually("the killed backend to exit", Duration::from_secs(10), || backend_gone(&mut other, doomed_pid));
    assert_eq!(
        count(&mut other, "SELECT 1 FROM distlock.running_tasks WHERE NOT holder_alive"),
        1,
        "the view sees the dead holder"
    );
    assert_eq!(sweep(&mut other), vec![(1, "doomed".to_string(), true)]);
    assert_eq!(
        count(&mut other, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'abandoned' AND worker_id = 'doomed'"),
        1
    );
    assert_eq!(claim_one(&mut other, "other"), Some(1), "the unfinished slot is claimable again");
    assert!(sweep(&mut other).is_empty(), "the new claim is alive");
}

#[test]
fn hung_holder_past_its_timeout_is_terminated_by_the_sweep() {
    let db = fresh_db("recovery_hung");
    one_task(&db, "UPDATE distlock.scheduled_tasks SET timeout = '1 second';");
    let mut hung = connect(&db);
    let hung_pid = backend_pid(&mut hung);
    assert_eq!(claim_one(&mut hung, "hung"), Some(1));
    let token: i64 = hung
        .query_one("SELECT fencing_token FROM distlock.task_execution_log", &[])
        .expect("token")
        .get(0);

    let mut sweeper = connect(&db);
    eventually("the claim to pass its timeout", Duration::from_secs(10), || {
        count(&mut sweeper, "SELECT 1 FROM distlock.running_tasks WHERE past_timeout") == 1
    });
    assert_eq!(sweep(&mut sweeper), vec![(1, "hung".to_string(), true)]);
    assert!(backend_gone(&mut sweeper, hung_pid), "pg_terminate_backend waited for the exit");
    assert!(hung.execute("SELECT 1", &[]).is_err(), "the hung session is gone");
    assert_eq!(
        count(&mut sweeper, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'timed_out'"),
        1
    );
    let fenced: bool = sweeper
        .query_one("SELECT distlock.check_fencing_token(1, $1)", &[&token])
        .expect("fence")
        .get(0);
    assert!(!fenced, "the timed-out claim's token is refused");
    let reclaimed: bool = sweeper
        .query_one("SELECT distlock.try_acquire_task_lock(1, 'next')", &[])
        .expect("claim")
        .get(0);
    assert!(reclaimed, "the lock was freed");
}

#[test]
fn running_claims_left_by_a_crash_are_abandoned_by_the_sweep() {
    let db = fresh_db("recovery_restart");
    connect(&db)
        .batch_execute(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) \
             SELECT 'job-' || i, 'etl', now() FROM generate_series(1, 3) i",
        )
        .expect("tasks");
    let mut holders: Vec<Client> = (0..3).map(|_| connect(&db)).collect();
    for (i, holder) in holders.iter_mut().enumerate() {
        assert!(claim_one(holder, &format!("w{i}")).is_some());
    }
    let mut after = crash_restart_primary(&db);
    drop(holders);
    assert_eq!(count(&mut after, "SELECT 1 FROM distlock.running_tasks WHERE NOT holder_alive"), 3);
    let swept = sweep(&mut after);
    assert_eq!(swept.len(), 3);
    assert!(swept.iter().all(|(_, _, released)| *released));
    assert_eq!(count(&mut after, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'abandoned'"), 3);
    assert_eq!(
        count(&mut after, "SELECT * FROM distlock.try_acquire_multiple_tasks('again', 10)"),
        3,
        "every task can be run again"
    );
}

#[test]
fn pg_cron_runs_the_sweep() {
    // pg_cron lives in the database named by cron.database_name (postgres).
    let mut c = connect("postgres");
    c.batch_execute(
        "DROP EXTENSION IF EXISTS pg_distlock CASCADE; CREATE EXTENSION pg_distlock; \
         CREATE EXTENSION IF NOT EXISTS pg_cron; \
         INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) VALUES ('cron-swept', 'etl', now());",
    )
    .expect("setup");
    let mut doomed = connect("postgres");
    let doomed_pid = backend_pid(&mut doomed);
    assert_eq!(claim_one(&mut doomed, "doomed"), Some(1));
    c.execute("SELECT pg_terminate_backend($1, 5000)", &[&doomed_pid]).expect("kill");
    c.execute(
        "SELECT cron.schedule('distlock-sweep', '* * * * *', \
         'SELECT * FROM distlock.check_and_recover_timeout_tasks()')",
        &[],
    )
    .expect("schedule");
    // pg_cron 1.4 runs jobs on minute boundaries.
    let recovered = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        eventually("pg_cron to run the sweep", Duration::from_secs(130), || {
            count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'abandoned'") == 1
        })
    }));
    c.batch_execute("SELECT cron.unschedule('distlock-sweep'); DROP EXTENSION pg_distlock CASCADE;")
        .expect("cleanup");
    if let Err(panic) = recovered {
        std::panic::resume_unwind(panic);
    }
}

/// A task lock held by a background worker (a pg_cron job: this primary
/// runs jobs in background workers) is reported, never signalled, even by
/// a superuser's sweep: only client backends are ended.
#[test]
fn the_sweep_never_terminates_a_background_worker() {
    let db = fresh_db("recovery_bgworker");
    one_task(&db, "UPDATE distlock.scheduled_tasks SET timeout = '1 second';");
    let mut c = connect("postgres");
    c.batch_execute("CREATE EXTENSION IF NOT EXISTS pg_cron").expect("pg_cron");
    let command = "SELECT distlock.worker_fetch_and_execute_task('cron-worker'); SELECT pg_sleep(300);";
    c.execute(
        "SELECT cron.schedule_in_database('distlock-bgworker-claim', '* * * * *', $1, $2)",
        &[&command, &db],
    )
    .expect("schedule");
    let mut sweeper = connect(&db);
    let holder_query = "SELECT l.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                         WHERE l.locktype = 'advisory' AND l.classid = distlock.task_lock_class()::oid \
                           AND l.objsubid = 25708 AND l.objid = 1 AND l.granted \
                           AND a.backend_type <> 'client backend'";
    // pg_cron 1.4 runs jobs on minute boundaries.
    let held = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        eventually("a pg_cron background worker to claim the task", Duration::from_secs(130), || {
            count(&mut sweeper, holder_query) == 1
        })
    }));
    c.batch_execute("SELECT cron.unschedule('distlock-bgworker-claim')").expect("unschedule");
    if let Err(panic) = held {
        std::panic::resume_unwind(panic);
    }
    let holder: i32 = sweeper.query_one(holder_query, &[]).expect("holder").get(0);
    // The claim's age as the sweep judges it: a committed claim past its
    // timeout, or (pg_cron 1.5+ runs a job's statements in one transaction)
    // an uncommitted one whose transaction is older than the timeout.
    eventually("the claim to pass its timeout", Duration::from_secs(10), || {
        count(
            &mut sweeper,
            &format!(
                "SELECT 1 FROM distlock.running_tasks WHERE holder_pid = {holder} AND past_timeout
                 UNION ALL
                 SELECT 1 FROM distlock.blocked_tasks WHERE pid = {holder} AND in_transaction_for > timeout"
            ),
        ) == 1
    });
    sweep(&mut sweeper);
    let alive = count(&mut sweeper, &format!("SELECT 1 FROM pg_stat_activity WHERE pid = {holder}")) == 1;
    c.execute("SELECT pg_terminate_backend($1, 5000)", &[&holder]).expect("end the job");
    assert!(alive, "the sweep terminated background worker {holder}");
}

#[test]
fn concurrent_sweeps_never_recover_the_same_claim_twice() {
    let db = fresh_db("recovery_sweeps");
    // 60 claims whose holders are long gone (pids no backend has).
    connect(&db)
        .batch_execute(
            "INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at) \
             SELECT 'job-' || g, 'etl', now() FROM generate_series(1, 60) g; \
             INSERT INTO distlock.task_execution_log (task_id, worker_id, status, holder_pid, holder_backend_start) \
             SELECT id, 'ghost-' || id, 'running', 2000000000 + id, now() - interval '1 day' \
               FROM distlock.scheduled_tasks;",
        )
        .expect("orphaned claims");
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
    let sweepers: Vec<_> = (0..4)
        .map(|_| {
            let db = db.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                let mut c = connect(&db);
                barrier.wait();
                sweep(&mut c).into_iter().map(|(task_id, _, _)| task_id).collect::<Vec<i32>>()
            })
        })
        .collect();
    let mut recovered: Vec<i32> = sweepers.into_iter().flat_map(|s| s.join().expect("sweeper")).collect();
    assert_eq!(recovered.len(), 60, "every orphaned claim was recovered once in total");
    recovered.sort();
    recovered.dedup();
    assert_eq!(recovered.len(), 60, "no claim was recovered by two sweeps");
    let mut c = connect(&db);
    assert_eq!(count(&mut c, "SELECT 1 FROM distlock.task_execution_log WHERE status = 'abandoned'"), 60);
}

#[test]
fn a_claim_left_uncommitted_in_an_open_transaction_is_ended_by_the_sweep() {
    let db = fresh_db("recovery_uncommitted");
    one_task(&db, "UPDATE distlock.scheduled_tasks SET timeout = '1 second';");
    let mut hung = connect_to(primary_port(), &db, "hung-app");
    let hung_pid = backend_pid(&mut hung);
    hung.batch_execute("BEGIN").expect("begin");
    assert_eq!(claim_one(&mut hung, "hung"), Some(1), "claimed inside the open transaction");

    let mut sweeper = connect(&db);
    assert_eq!(
        count(&mut sweeper, "SELECT 1 FROM distlock.running_tasks"),
        0,
        "the claim's log row is not committed, so no running claim shows it"
    );
    assert_eq!(
        count(&mut sweeper, &format!("SELECT 1 FROM distlock.blocked_tasks WHERE task_id = 1 AND pid = {hung_pid}")),
        1,
        "blocked_tasks shows the lock held without a committed claim"
    );
    assert_eq!(claim_one(&mut sweeper, "other"), None, "the task is blocked meanwhile");
    assert!(sweep(&mut sweeper).is_empty(), "a young transaction is left alone");

    eventually("the open transaction to pass the task's timeout", Duration::from_secs(10), || {
        count(&mut sweeper, "SELECT 1 FROM distlock.blocked_tasks WHERE in_transaction_for > timeout") == 1
    });
    assert_eq!(sweep(&mut sweeper), vec![(1, "hung-app".to_string(), true)]);
    assert!(backend_gone(&mut sweeper, hung_pid), "the holder was terminated");
    assert!(hung.execute("SELECT 1", &[]).is_err(), "the hung session is gone");
    assert_eq!(count(&mut sweeper, "SELECT 1 FROM distlock.task_execution_log"), 0, "its claim rolled back");
    assert_eq!(claim_one(&mut sweeper, "other"), Some(1), "the due slot is claimed again");
}

/// A session claim's token is current only while its holder holds the task:
/// the moment the holder is terminated, or its session lets go of its locks
/// (a pooler's DISCARD ALL runs pg_advisory_unlock_all), the token is
/// refused, before any sweep, and running_tasks agrees.
#[test]
fn a_session_claims_token_ends_with_its_holder() {
    let db = fresh_db("recovery_token_ends");
    one_task(&db, "");
    let mut checker = connect(&db);
    let fenced = |c: &mut Client, task: i32, token: i64| -> bool {
        c.query_one("SELECT distlock.check_fencing_token($1, $2)", &[&task, &token]).expect("check").get(0)
    };
    let alive = |c: &mut Client, token: i64| -> bool {
        c.query_one("SELECT holder_alive FROM distlock.running_tasks WHERE fencing_token = $1", &[&token]).expect("view").get(0)
    };
    let token_of = |c: &mut Client, task: i32| -> i64 {
        c.query_one("SELECT current_token FROM distlock.scheduled_tasks WHERE id = $1", &[&task]).expect("token").get(0)
    };

    let mut doomed = connect(&db);
    let doomed_pid = backend_pid(&mut doomed);
    assert_eq!(claim_one(&mut doomed, "doomed"), Some(1));
    let token = token_of(&mut checker, 1);
    assert!(fenced(&mut checker, 1, token), "current while its holder lives");
    assert!(fenced(&mut doomed, 1, token), "the holder itself sees its token as current");
    assert!(alive(&mut checker, token));
    checker.execute("SELECT pg_terminate_backend($1, 5000)", &[&doomed_pid]).expect("terminate");
    assert!(backend_gone(&mut checker, doomed_pid), "pg_terminate_backend waited for the exit");
    assert!(!fenced(&mut checker, 1, token), "a dead holder's token is refused");
    assert!(!alive(&mut checker, token), "the view agrees");

    let mut discarding = connect(&db);
    let task = claim_one(&mut discarding, "discarding").expect("a claim");
    let token = token_of(&mut checker, task);
    assert!(fenced(&mut checker, task, token));
    discarding.batch_execute("DISCARD ALL").expect("discard");
    assert!(!fenced(&mut checker, task, token), "a holder that let go of its lock no longer fences");
    assert!(!fenced(&mut discarding, task, token), "not even for itself");
    assert!(!alive(&mut checker, token), "the view agrees");
}
