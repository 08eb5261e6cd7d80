//! Consumers waiting in the server for jobs (consume_task's p_wait): woken
//! by what commits, not by what rolls back; by leases running out; stopped
//! by cancel and statement_timeout; through PgBouncer; and without preload.

use std::thread;
use std::time::{Duration, Instant};

use crate::support::*;

/// What a waiting consumer got, and how long its call took.
pub(crate) struct Waited {
    pub job: Option<i64>,
    /// How many jobs it got (a batch consumer's rows).
    pub jobs: usize,
    pub took: Duration,
}

/// Consumers of `db` sleeping in the server right now, seen on the server
/// itself (`server_port`), not through a pooler.
pub(crate) fn sleeping(server_port: u16, db: &str) -> i64 {
    let mut watcher = connect_to(server_port, db, "watcher");
    scalar(
        &mut watcher,
        &format!("SELECT count(*) FROM pg_stat_activity WHERE datname = '{db}' AND wait_event_type = 'Extension'"),
    )
    .expect("count")
    .parse()
    .expect("count")
}

/// Starts `consume_task(p_wait => wait)` through `port` and returns once one
/// more consumer sleeps in the server, so that what the test does next
/// happens while it waits.
pub(crate) fn start_waiting(
    port: u16,
    server_port: u16,
    db: &str,
    worker: &str,
    wait: &str,
) -> thread::JoinHandle<Result<Waited, postgres::Error>> {
    start_waiting_on(port, server_port, db, worker, wait, "NULL")
}

/// `start_waiting` for the queues `queues` (an SQL text[] expression).
pub(crate) fn start_waiting_on(
    port: u16,
    server_port: u16,
    db: &str,
    worker: &str,
    wait: &str,
    queues: &str,
) -> thread::JoinHandle<Result<Waited, postgres::Error>> {
    let sql = format!("SELECT task_id FROM distlock.consume_task('{worker}', p_wait => '{wait}', p_queues => {queues})");
    start_waiting_with(port, server_port, db, worker, sql)
}

/// Starts `sql`, a consume call that waits and returns job ids, as
/// `start_waiting` does.
pub(crate) fn start_waiting_with(
    port: u16,
    server_port: u16,
    db: &str,
    worker: &str,
    sql: String,
) -> thread::JoinHandle<Result<Waited, postgres::Error>> {
    let before = sleeping(server_port, db);
    let mut c = connect_to(port, db, worker);
    let handle = thread::spawn(move || {
        let started = Instant::now();
        let rows = c.simple_query(&sql)?;
        let ids: Vec<i64> = rows
            .iter()
            .filter_map(|m| match m {
                postgres::SimpleQueryMessage::Row(row) => row.get(0).map(|v| v.parse::<i64>().expect("id")),
                _ => None,
            })
            .collect();
        Ok(Waited { job: ids.first().copied(), jobs: ids.len(), took: started.elapsed() })
    });
    eventually(&format!("{worker} to sleep in the server"), Duration::from_secs(10), || {
        sleeping(server_port, db) > before
    });
    handle
}

pub(crate) fn finish(handle: thread::JoinHandle<Result<Waited, postgres::Error>>) -> Result<Waited, postgres::Error> {
    handle.join().expect("waiting thread")
}

fn enqueue(c: &mut Client, name: &str) -> i64 {
    scalar(c, &format!("SELECT distlock.enqueue_task('{name}')")).expect("id").parse().expect("id")
}

/// A consumer of a paused queue that holds a job sleeps (start_waiting_on
/// returns only once it does) and takes the job once the queue is resumed.
#[test]
fn a_waiting_consumer_of_a_paused_queue_sleeps_until_it_is_resumed() {
    let db = fresh_db("queue_wait_paused");
    let mut admin = connect(&db);
    admin.batch_execute("SELECT distlock.pause_queue('email')").expect("pause");
    let job: i64 = scalar(&mut admin, "SELECT distlock.enqueue_task('job', p_queue => 'email')")
        .expect("id")
        .parse()
        .expect("id");
    let waiter = start_waiting_on(primary_port(), primary_port(), &db, "mailer", "60 seconds", "ARRAY['email']");
    let resumed = Instant::now();
    admin.batch_execute("SELECT distlock.resume_queue('email')").expect("resume");
    assert_eq!(finish(waiter).expect("wait").job, Some(job));
    assert!(resumed.elapsed() < Duration::from_secs(5), "took the job {:?} after the resume", resumed.elapsed());
}

/// A consumer waiting on one queue sleeps through another queue's job and
/// takes the next job of its own queue.
#[test]
fn a_waiting_consumer_of_one_queue_takes_only_that_queues_jobs() {
    let db = fresh_db("queue_wait_routing");
    let mut producer = connect(&db);
    let waiter = start_waiting_on(primary_port(), primary_port(), &db, "mailer", "60 seconds", "ARRAY['email']");
    let enqueue_in = |c: &mut Client, queue: &str| -> i64 {
        scalar(c, &format!("SELECT distlock.enqueue_task('job', p_queue => '{queue}')")).expect("id").parse().expect("id")
    };
    let thumbnail = enqueue_in(&mut producer, "thumbnails");
    let email = enqueue_in(&mut producer, "email");
    assert_eq!(finish(waiter).expect("wait").job, Some(email));
    assert_eq!(
        scalar(&mut producer, &format!("SELECT status FROM distlock.jobs WHERE id = {thumbnail}")).as_deref(),
        Some("pending"),
        "the other queue's job is left for its own consumers"
    );
}

pub(crate) fn wakeups(c: &mut Client) -> i64 {
    scalar(c, "SELECT wakeups FROM distlock.queue_wait_stats()").expect("wakeups").parse().expect("wakeups")
}

/// A commit wakes as many waiting consumers as it made jobs runnable, of
/// the queue that got them; a committed claim wakes none (its lease runs
/// out after every waiter's own wake-up). Counted by the wake-ups sent.
#[test]
fn a_commit_wakes_one_waiting_consumer_per_job_of_its_queue_and_a_claim_wakes_none() {
    let db = fresh_db("queue_wait_herd");
    let mut producer = connect(&db);
    let waiters_a: Vec<_> = (0..6)
        .map(|i| start_waiting_on(primary_port(), primary_port(), &db, &format!("a-{i}"), "60 seconds", "ARRAY['a']"))
        .collect();
    let waiters_b: Vec<_> = (0..4)
        .map(|i| start_waiting_on(primary_port(), primary_port(), &db, &format!("b-{i}"), "60 seconds", "ARRAY['b', 'x']"))
        .collect();
    assert_eq!(scalar(&mut producer, "SELECT sleeping FROM distlock.queue_wait_stats()").as_deref(), Some("10"));
    let before = wakeups(&mut producer);
    let job = enqueue_into(&mut producer, "a");
    let (woken, asleep): (Vec<_>, Vec<_>) = settle_waiters(waiters_a, 1);
    assert_eq!(woken, [job], "one consumer of queue a took the job");
    assert_eq!(wakeups(&mut producer) - before, 1, "the enqueue woke one consumer, and its claim none");

    producer
        .batch_execute(
            "BEGIN; SELECT distlock.enqueue_task('job', p_queue => 'b') FROM generate_series(1, 3); \
             SELECT distlock.enqueue_task('job', p_queue => 'nobody-waits'); COMMIT;",
        )
        .expect("four jobs");
    let (woken_b, asleep_b) = settle_waiters(waiters_b, 3);
    assert_eq!(woken_b.len(), 3, "three consumers of queue b took the three jobs");
    assert_eq!(wakeups(&mut producer) - before, 4, "three more wake-ups, none for the queue nobody waits on");
    assert_eq!(scalar(&mut producer, "SELECT sleeping FROM distlock.queue_wait_stats()").as_deref(), Some("6"));
    cancel_the_waiting(&mut producer, &db, asleep.into_iter().chain(asleep_b));
}

/// Cancels the consumers of `db` still waiting in the server, `waiters`,
/// and checks that each one's call ended in the cancel. A consumer may be
/// between sleeps (in table mode it looks every 100 ms), where it is not an
/// 'Extension' wait, so every consume call still running is cancelled, again
/// until every waiter has ended.
pub(crate) fn cancel_the_waiting(c: &mut Client, db: &str, waiters: impl IntoIterator<Item = Waiter>) {
    let waiters: Vec<Waiter> = waiters.into_iter().collect();
    eventually("every consumer left waiting to end in a cancel", Duration::from_secs(20), || {
        c.batch_execute(&format!(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE datname = '{db}' AND state = 'active' \
             AND pid <> pg_backend_pid() AND query LIKE '%consume_task%'"
        ))
        .expect("cancel the others");
        waiters.iter().all(|w| w.is_finished())
    });
    for waiter in waiters {
        assert!(finish(waiter).is_err(), "a consumer left waiting was cancelled");
    }
}

/// A commit wakes waiting batch consumers until their batches cover the
/// jobs it made runnable: fifteen jobs wake two consumers that claim up to
/// ten each, not fifteen, and the two take all fifteen.
#[test]
fn a_commit_wakes_only_as_many_waiting_batch_consumers_as_its_jobs_fill() {
    let db = fresh_db("queue_wait_batches");
    let mut producer = connect(&db);
    let waiters: Vec<_> = (0..4)
        .map(|i| {
            let worker = format!("batch-{i}");
            let sql = format!(
                "SELECT task_id FROM distlock.consume_tasks(10, '{worker}', p_wait => '60 seconds', p_queues => ARRAY['c'])"
            );
            start_waiting_with(primary_port(), primary_port(), &db, &worker, sql)
        })
        .collect();
    let before = wakeups(&mut producer);
    producer
        .batch_execute("SELECT distlock.enqueue_task('job', p_queue => 'c') FROM generate_series(1, 15)")
        .expect("fifteen jobs in one commit");
    eventually("the woken consumers to return", Duration::from_secs(10), || {
        waiters.iter().filter(|w| w.is_finished()).count() >= 2
    });
    let (done, asleep): (Vec<_>, Vec<_>) = waiters.into_iter().partition(|w| w.is_finished());
    let mut taken: Vec<usize> = done.into_iter().map(|w| finish(w).expect("wait").jobs).collect();
    taken.sort_unstable();
    assert_eq!(taken.len(), 2, "two consumers returned: {taken:?}");
    assert_eq!(taken.iter().sum::<usize>(), 15, "the two took every job: {taken:?}");
    assert_eq!(wakeups(&mut producer) - before, 2, "the commit woke two consumers, and their claims none");
    assert_eq!(scalar(&mut producer, "SELECT sleeping FROM distlock.queue_wait_stats()").as_deref(), Some("2"));
    cancel_the_waiting(&mut producer, &db, asleep);
}

/// A consumer of two queues woken for a job of the second, whose look fills
/// its batch from the first, passes the wake-up on to a consumer of the
/// second queue rather than leave that job to the other's deadline.
#[test]
fn a_consumer_woken_for_a_queue_its_look_did_not_reach_passes_the_wake_up_on() {
    let db = fresh_db("queue_wait_pass_on");
    let mut producer = connect(&db);
    let both = start_waiting_on(primary_port(), primary_port(), &db, "both", "60 seconds", "ARRAY['first', 'second']");
    // Queued without waking anyone: the consumer of both queues finds it
    // only when something else wakes it.
    let first: i64 = scalar(&mut producer, "INSERT INTO distlock.task_queue (task_name, queue) VALUES ('job', 'first') RETURNING id")
        .expect("id")
        .parse()
        .expect("id");
    let second_only =
        start_waiting_on(primary_port(), primary_port(), &db, "second-only", "60 seconds", "ARRAY['second']");
    let enqueued = Instant::now();
    // One wake-up for queue 'second'. Wakers scan the sleepers from a
    // rotating start and the consumer of both took its entry first (the one
    // before the other's), so it is nearly always the one woken.
    let second = enqueue_into(&mut producer, "second");
    let got = finish(second_only).expect("wait");
    assert_eq!(got.job, Some(second));
    assert!(enqueued.elapsed() < Duration::from_secs(10), "the job of 'second' waited {:?}", enqueued.elapsed());
    // Woken, it returned before it passed the wake-up on.
    let deadline = Instant::now() + Duration::from_secs(5);
    while !both.is_finished() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
    }
    if both.is_finished() {
        assert_eq!(finish(both).expect("wait").job, Some(first), "the consumer of both took the first queue's job");
    } else {
        cancel_the_waiting(&mut producer, &db, [both]);
    }
}

pub(crate) fn enqueue_into(c: &mut Client, queue: &str) -> i64 {
    scalar(c, &format!("SELECT distlock.enqueue_task('job', p_queue => '{queue}')")).expect("id").parse().expect("id")
}

pub(crate) type Waiter = thread::JoinHandle<Result<Waited, postgres::Error>>;

/// Waits until `returned` of `waiters` have returned; their jobs, and the
/// waiters still waiting (the wake-up count shows that no other was woken).
pub(crate) fn settle_waiters(waiters: Vec<Waiter>, returned: usize) -> (Vec<i64>, Vec<Waiter>) {
    eventually("the woken consumers to return", Duration::from_secs(10), || {
        waiters.iter().filter(|w| w.is_finished()).count() >= returned
    });
    let (done, waiting): (Vec<_>, Vec<_>) = waiters.into_iter().partition(|w| w.is_finished());
    assert_eq!(done.len(), returned, "only the woken consumers returned");
    let jobs = done.into_iter().map(|w| finish(w).expect("wait").job.expect("a job")).collect();
    (jobs, waiting)
}

#[test]
fn a_committed_enqueue_wakes_a_waiting_consumer_and_a_rolled_back_one_does_not() {
    let db = fresh_db("queue_wait_commit");
    let mut producer = connect(&db);

    let waiter = start_waiting(primary_port(), primary_port(), &db, "w1", "3 seconds");
    producer.batch_execute("BEGIN; SELECT distlock.enqueue_task('rolled-back'); ROLLBACK;").expect("rollback");
    let got = finish(waiter).expect("wait");
    assert_eq!(got.job, None, "a rolled-back job was handed out");
    assert!(got.took >= Duration::from_millis(2900), "returned after {:?} of a 3 s wait", got.took);

    let waiter = start_waiting(primary_port(), primary_port(), &db, "w2", "60 seconds");
    let committed = Instant::now();
    let id = enqueue(&mut producer, "committed");
    let got = finish(waiter).expect("wait");
    assert_eq!(got.job, Some(id));
    assert!(committed.elapsed() < Duration::from_secs(5), "woken {:?} after the commit", committed.elapsed());
}

#[test]
fn a_claim_rolled_back_wakes_a_waiting_consumer() {
    let db = fresh_db("queue_wait_claim_rollback");
    let mut producer = connect(&db);
    let id = enqueue(&mut producer, "job");
    let mut first = connect(&db);
    first.batch_execute("BEGIN").expect("begin");
    assert_eq!(scalar(&mut first, "SELECT task_id FROM distlock.consume_task('first')"), Some(id.to_string()));
    let waiter = start_waiting(primary_port(), primary_port(), &db, "second", "60 seconds");
    let rolled_back = Instant::now();
    first.batch_execute("ROLLBACK").expect("rollback");
    let got = finish(waiter).expect("wait");
    assert_eq!(got.job, Some(id));
    assert!(rolled_back.elapsed() < Duration::from_secs(5), "woken {:?} after the rollback", rolled_back.elapsed());
}

#[test]
fn a_lease_running_out_wakes_a_waiting_consumer() {
    let db = fresh_db("queue_wait_lease");
    let mut producer = connect(&db);
    let id = enqueue(&mut producer, "job");
    // A consumer that claims and then goes silent.
    assert_eq!(scalar(&mut producer, "SELECT task_id FROM distlock.consume_task('gone', '2 seconds')"), Some(id.to_string()));
    let claimed = Instant::now();
    let waiter = start_waiting(primary_port(), primary_port(), &db, "next", "60 seconds");
    let got = finish(waiter).expect("wait");
    assert_eq!(got.job, Some(id));
    let after = claimed.elapsed();
    assert!(after >= Duration::from_millis(1900) && after < Duration::from_secs(10), "taken over {after:?} after the claim");
    assert_eq!(scalar(&mut producer, &format!("SELECT attempts FROM distlock.jobs WHERE id = {id}")), Some("2".into()));
}

#[test]
fn a_waiting_consumer_stops_at_cancel_and_statement_timeout() {
    let db = fresh_db("queue_wait_cancel");
    let mut c = connect_to(primary_port(), &db, "waiter");
    let pid = backend_pid(&mut c);
    let waiter = thread::spawn(move || {
        let started = Instant::now();
        let result = c.simple_query("SELECT * FROM distlock.consume_task('w', p_wait => '60 seconds')");
        (sqlstate(result), started.elapsed(), c)
    });
    let mut admin = connect(&db);
    eventually("the consumer to wait", Duration::from_secs(10), || {
        scalar(&mut admin, &format!("SELECT wait_event_type FROM pg_stat_activity WHERE pid = {pid}")).as_deref()
            == Some("Extension")
    });
    admin.batch_execute(&format!("SELECT pg_cancel_backend({pid})")).expect("cancel");
    let (state, took, mut c) = waiter.join().expect("thread");
    assert_eq!(state, "57014");
    assert!(took < Duration::from_secs(10), "cancel took {took:?}");

    c.batch_execute("SET statement_timeout = '300ms'").expect("set");
    let started = Instant::now();
    assert_eq!(sqlstate(c.simple_query("SELECT * FROM distlock.consume_task('w', p_wait => '60 seconds')")), "57014");
    assert!(started.elapsed() < Duration::from_secs(10), "statement_timeout took {:?}", started.elapsed());
    // The session is usable afterwards and no longer counted as sleeping:
    // a claim in another session is not slowed by wake-ups.
    c.batch_execute("RESET statement_timeout").expect("reset");
    assert_eq!(scalar(&mut c, "SELECT count(*) FROM distlock.consume_task('w')"), Some("0".into()));
}

#[test]
fn waiting_is_refused_where_the_snapshot_cannot_move() {
    let db = fresh_db("queue_wait_isolation");
    let mut c = connect(&db);
    c.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ").expect("begin");
    assert_eq!(sqlstate(c.simple_query("SELECT * FROM distlock.consume_task('w', p_wait => '1 second')")), "0A000");
}

#[test]
fn a_consumer_waits_through_pgbouncer_holding_one_server_connection() {
    let db = fresh_db("queue_wait_pooler");
    // Three of the pool's four server connections wait; the fourth still serves.
    let waiters: Vec<_> =
        (0..3).map(|i| start_waiting(pooler_port(), primary_port(), &db, &format!("pooled-{i}"), "60 seconds")).collect();
    let mut producer = connect_to(pooler_port(), &db, "producer");
    let ids: Vec<i64> = (0..3).map(|i| enqueue(&mut producer, &format!("job-{i}"))).collect();
    let mut got: Vec<i64> = waiters.into_iter().map(|w| finish(w).expect("wait").job.expect("a job")).collect();
    got.sort_unstable();
    assert_eq!(got, ids);
}

#[test]
fn without_preload_a_waiting_consumer_still_gets_the_job() {
    let db = fresh_db_on(plain_port(), "queue_wait_plain");
    let waiter = start_waiting(plain_port(), plain_port(), &db, "plain", "60 seconds");
    let mut producer = connect_to(plain_port(), &db, "producer");
    let committed = Instant::now();
    let id = enqueue(&mut producer, "job");
    assert_eq!(finish(waiter).expect("wait").job, Some(id));
    assert!(committed.elapsed() < Duration::from_secs(5), "found {:?} after the commit", committed.elapsed());
}

/// CPU ticks (user + system, 1/100 s) a server process has used so far.
pub(crate) fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat of the backend");
    // Fields after the command name, which is in parentheses: utime and
    // stime are the 12th and 13th of them.
    let after_name = &stat[stat.rfind(')').expect("command name") + 2..];
    let fields: Vec<&str> = after_name.split(' ').collect();
    fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime")
}

/// A job whose lease ran out while another transaction keeps its row locked
/// cannot be taken over until that transaction ends; a consumer waiting
/// meanwhile looks again once a second instead of spinning on it.
#[test]
fn a_waiting_consumer_does_not_spin_on_a_locked_expired_job() {
    let db = fresh_db("queue_wait_locked_expired");
    let mut c = connect(&db);
    let job = enqueue(&mut c, "stuck");
    c.batch_execute("SELECT * FROM distlock.consume_task('gone', '1 second')").expect("claim with a short lease");
    let mut locker = connect(&db);
    locker
        .batch_execute(&format!("BEGIN; SELECT 1 FROM distlock.task_queue WHERE id = {job} FOR UPDATE"))
        .expect("lock the job's row");
    eventually("the lease to run out", Duration::from_secs(10), || {
        count(&mut c, &format!("SELECT 1 FROM distlock.jobs WHERE id = {job} AND lease_expires_at < now()")) == 1
    });
    let mut waiter = connect(&db);
    let pid = backend_pid(&mut waiter);
    let before = cpu_ticks(pid);
    let started = Instant::now();
    let got = waiter.query("SELECT task_id FROM distlock.consume_task('w', '1 minute', '3 seconds')", &[]).expect("wait");
    let took = started.elapsed();
    let used = cpu_ticks(pid) - before;
    locker.batch_execute("ROLLBACK").expect("unlock");
    assert!(got.is_empty(), "the locked job was handed out");
    assert!(took >= Duration::from_millis(2900), "the wait ended early: {took:?}");
    assert!(used <= 3, "the waiting backend used {used} CPU ticks in 3 s (idle is 0; spinning used 27)");
}

/// A waiting consumer names its wait in pg_stat_activity: `DistlockQueueWait`
/// from PostgreSQL 17 on (a custom wait event), the generic `Extension`
/// before; in both modes (condition variable and latch).
#[test]
fn a_waiting_consumer_shows_a_named_wait_event() {
    let expected = if PG_MAJOR >= 17 { "DistlockQueueWait" } else { "Extension" };
    for (mode, port) in storage_modes() {
        let db = fresh_db_on(port, &format!("queue_wait_event_{mode}"));
        let waiter = start_waiting(port, port, &db, "named", "60 seconds");
        let mut watcher = connect_to(port, &db, "watcher");
        let shown = scalar(
            &mut watcher,
            &format!(
                "SELECT wait_event_type || '/' || wait_event FROM pg_stat_activity
                  WHERE datname = '{db}' AND application_name = 'named'"
            ),
        );
        assert_eq!(shown.as_deref(), Some(format!("Extension/{expected}").as_str()), "{mode} mode");
        enqueue(&mut watcher, "wake");
        assert!(finish(waiter).expect("wait").job.is_some(), "{mode} mode");
    }
}

/// Whether `worker`'s backend sleeps in the server, and the xmin it holds
/// back meanwhile (None: none). A waiting consumer wakes now and then (a
/// due time, a look at the horizon): a poll can find it awake.
fn xmin_while_sleeping(c: &mut Client, db: &str, worker: &str) -> (bool, Option<String>) {
    let row = c
        .query_one(
            "SELECT wait_event_type, backend_xmin::text FROM pg_stat_activity
              WHERE datname = $1 AND application_name = $2",
            &[&db, &worker],
        )
        .expect("the consumer's backend");
    (row.get::<_, Option<String>>(0).as_deref() == Some("Extension"), row.get(1))
}

/// A consumer waiting in a statement of its own holds back no xmin horizon
/// while it sleeps (so vacuum can remove what dies meanwhile), in the
/// shapes clients send: a plain call, an aggregate over it, a call through
/// the extended protocol; each still takes the job that wakes it. Between
/// two sleeps of the polling mode a look holds a snapshot for a moment,
/// hence a sleep without one is waited for.
#[test]
fn a_waiting_consumer_does_not_hold_back_the_xmin_horizon() {
    for (mode, port) in storage_modes() {
        let db = fresh_db_on(port, &format!("queue_wait_horizon_{mode}"));
        let mut watcher = connect_to(port, &db, "watcher");
        let plain = start_waiting(port, port, &db, "plain", "60 seconds");
        let aggregate = start_waiting_with(
            port,
            port,
            &db,
            "aggregate",
            "SELECT coalesce(max(task_id), 0) FROM distlock.consume_task('aggregate', p_wait => '60 seconds')".into(),
        );
        let before = sleeping(port, &db);
        let mut c = connect_to(port, &db, "extended");
        let extended = thread::spawn(move || {
            c.query("SELECT task_id FROM distlock.consume_task($1, p_wait => '60 seconds')", &[&"extended"])
                .map(|rows| rows.len())
        });
        eventually("extended to sleep in the server", Duration::from_secs(10), || sleeping(port, &db) > before);
        for worker in ["plain", "aggregate", "extended"] {
            eventually(&format!("{worker} to sleep without an xmin ({mode} mode)"), Duration::from_secs(10), || {
                xmin_while_sleeping(&mut watcher, &db, worker) == (true, None)
            });
        }
        watcher
            .batch_execute("SELECT distlock.enqueue_task('wake') FROM generate_series(1, 3)")
            .expect("three jobs in one commit");
        assert!(finish(plain).expect("plain").job.is_some(), "{mode} mode: plain took a job");
        assert!(finish(aggregate).expect("aggregate").job.unwrap_or(0) > 0, "{mode} mode: aggregate took a job");
        assert_eq!(extended.join().expect("thread").expect("extended"), 1, "{mode} mode: extended took a job");
    }
}

/// Where the statement's snapshot may be read again after the wait, in a
/// transaction block, in a query that reads more than the call, or in a
/// function's loop over the call (a cursor, run by a statement that goes
/// on), the consumer keeps its xmin while it sleeps.
#[test]
fn a_consumer_waiting_inside_a_transaction_or_a_larger_query_keeps_its_xmin() {
    let db = fresh_db("queue_wait_keeps_horizon");
    let mut watcher = connect(&db);
    let in_block = start_waiting_with(
        primary_port(),
        primary_port(),
        &db,
        "in_block",
        "BEGIN; SELECT task_id FROM distlock.consume_task('in_block', p_wait => '60 seconds'); COMMIT".into(),
    );
    let joined = start_waiting_with(
        primary_port(),
        primary_port(),
        &db,
        "joined",
        "SELECT c.task_id FROM distlock.consume_task('joined', p_wait => '60 seconds') c
           CROSS JOIN (SELECT 1 FROM pg_catalog.pg_class LIMIT 1) one"
            .into(),
    );
    let looped = start_waiting_with(
        primary_port(),
        primary_port(),
        &db,
        "looped",
        "DO $$ DECLARE job record; BEGIN
           FOR job IN SELECT task_id FROM distlock.consume_task('looped', p_wait => '60 seconds') LOOP
           END LOOP;
         END $$"
            .into(),
    );
    for worker in ["in_block", "joined", "looped"] {
        eventually(&format!("{worker} to sleep keeping its xmin"), Duration::from_secs(10), || {
            let (asleep, xmin) = xmin_while_sleeping(&mut watcher, &db, worker);
            asleep && xmin.is_some()
        });
    }
    watcher.batch_execute("SELECT distlock.enqueue_task('wake') FROM generate_series(1, 3)").expect("three jobs");
    assert!(finish(in_block).expect("in_block").job.is_some(), "in_block took a job");
    assert!(finish(joined).expect("joined").job.is_some(), "joined took a job");
    finish(looped).expect("looped");
    assert_eq!(
        scalar(&mut watcher, "SELECT count(*) FROM distlock.task_queue WHERE status = 'processing'").as_deref(),
        Some("3"),
        "each of the three took a job"
    );
}

/// A look can lock a job it does not take: one that another transaction
/// changed after the look's snapshot (an extended lease, a failed attempt)
/// is locked in its newest version before PostgreSQL's recheck in READ
/// COMMITTED finds it no longer claimable, and the lock gives the
/// transaction an id. A consumer sleeping with an id holds back every other
/// snapshot's xmin, so vacuum and index scans keep every row version that
/// died since; at 64 waiting consumers a few always slept with one. Such a
/// call returns with no job instead, for its caller to call again. No SQL
/// step can pause a statement between its snapshot and its lock, so a
/// trigger that skips the claim's delete of a job's runnable version stands
/// in for the race: the look locks a job and returns no row.
#[test]
fn a_look_that_locked_a_job_it_did_not_take_does_not_sleep_with_a_transaction_id() {
    let db = fresh_db("queue_wait_locked_not_taken");
    let mut c = connect(&db);
    c.batch_execute(
        "CREATE FUNCTION public.skip_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
         CREATE TRIGGER skip_decoy BEFORE DELETE ON distlock.task_queue
            FOR EACH ROW WHEN (OLD.task_name = 'decoy') EXECUTE FUNCTION public.skip_delete()",
    )
    .expect("a trigger that skips the claim of the decoy");
    let decoy = enqueue(&mut c, "decoy");
    let mut waiter = connect_to(primary_port(), &db, "locker");
    let handle = thread::spawn(move || {
        let started = Instant::now();
        let rows = waiter.query("SELECT task_id FROM distlock.consume_task('locker', p_wait => '60 seconds')", &[])?;
        Ok::<_, postgres::Error>((rows.len(), started.elapsed()))
    });
    let state = |c: &mut Client| {
        scalar(
            c,
            &format!(
                "SELECT wait_event_type || '/' || (backend_xid IS NOT NULL) FROM pg_stat_activity
                  WHERE datname = '{db}' AND application_name = 'locker'"
            ),
        )
    };
    eventually("the consumer to return or sleep", Duration::from_secs(10), || {
        handle.is_finished() || state(&mut c).is_some_and(|shown| shown.starts_with("Extension/"))
    });
    assert_ne!(state(&mut c).as_deref(), Some("Extension/true"), "the consumer sleeps with a transaction id");
    let (got, took) = handle.join().expect("waiting thread").expect("the wait");
    assert_eq!(got, 0, "the decoy was handed out");
    assert!(took < Duration::from_secs(30), "the call waited {took:?}");
    assert_eq!(
        scalar(&mut c, &format!("SELECT status FROM distlock.task_queue WHERE id = {decoy}")).as_deref(),
        Some("pending")
    );
}

/// A consumer waiting when ALTER EXTENSION UPDATE to 0.4.0 commits: before
/// it, queues are named by 0.3.0's hash (so that 0.3.0's library, on 17+
/// without preload sharing the sleepers, still wakes and is woken); after
/// it, wakers name them by the keyed hash, which the waiting consumer's
/// entry does not carry. It still gets a job enqueued after the update
/// within about a second, not at the end of its wait (found by review).
#[test]
fn a_consumer_waiting_across_the_update_to_0_4_0_gets_a_job_enqueued_after_it() {
    let name = "queue_wait_across_update";
    let mut c = fresh_db_at_version(name, "0.3.0");
    let mut waiter = connect_to(primary_port(), name, "waiter");
    // Plans prepared first: a first preparation during the wait would hold
    // its relation locks for the whole wait and so hold the update back.
    waiter.batch_execute("SELECT * FROM distlock.consume_task('w', '1 minute', NULL, ARRAY['q'])").expect("warm");
    let handle = thread::spawn(move || {
        waiter
            .query("SELECT task_name FROM distlock.consume_task('w', '1 minute', '60 seconds', ARRAY['q'])", &[])
            .map(|rows| (rows.iter().map(|r| r.get::<_, String>(0)).collect::<Vec<_>>(), Instant::now()))
    });
    eventually("the consumer waits", Duration::from_secs(10), || {
        count(&mut c, "SELECT 1 FROM pg_stat_activity WHERE application_name = 'waiter' AND wait_event_type = 'Extension'") == 1
    });
    c.batch_execute("ALTER EXTENSION pg_distlock UPDATE").expect("update");
    let enqueued = Instant::now();
    c.batch_execute("SELECT distlock.enqueue_task('after-the-update', '{}', p_queue => 'q')").expect("enqueue");
    let (got, returned) = handle.join().expect("waiter").expect("wait");
    assert_eq!(got, ["after-the-update"]);
    let took = returned.duration_since(enqueued);
    // Without the look each second: about 10 s (the waiting consumer's own
    // periodic look), or the end of its wait.
    assert!(took < Duration::from_secs(3), "the waiting consumer got the job {took:?} after it was enqueued");
}
