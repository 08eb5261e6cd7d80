//! A seeded nemesis soak of the job queue against the test primary, the
//! queue's counterpart of nemesis.rs. Producers (threads of the test) enqueue
//! into three queues, `free`, `limited` (distlock.set_queue_limit 1 or 2)
//! and `pausable`: immediate and delayed jobs (p_run_after up to 4 s), jobs
//! with unique keys, jobs of prepared transactions, 1-3 attempts each.
//! A fourth queue, `later`, has a producer and LATER_CONSUMERS consumers
//! of its own that play out what issue 45's defect 4 needed: consumers wait
//! long (p_wait 10-15 s) and idle while every few seconds a short burst
//! brings a job due in 1-3 s and immediate ones, so that the one consumer
//! woken to learn of the delayed job (or of a hung holder's short lease)
//! often takes an immediate job and works for seconds while the job it
//! learned of comes due: the others, idle, must get it within a second.
//! Consumers, 8-20 separate OS processes (this test binary run again, see
//! `consumer_process`), claim with short leases (1-3 s) through
//! consume_task and consume_tasks with and without p_wait,
//! settle_and_consume_tasks, claims rolled back to a savepoint and claims in
//! prepared transactions; they complete or fail (fail_task) their jobs,
//! and sometimes hang past their lease. Meanwhile a nemesis SIGKILLs
//! consumer processes (restarted as a new incarnation), terminates their
//! backends (pg_terminate_backend), SIGSTOPs backends for up to 1.2 s,
//! runs DDL on distlock.task_queue (fillfactor, VACUUM FULL, a brief
//! LOCK TABLE ... ACCESS EXCLUSIVE) and pauses and resumes `pausable`. A
//! keeper resolves prepared transactions whose client died. Then the
//! checker (queue_checker.rs, which lists exactly what it checks) reads
//! the history all processes wrote, the claim log a trigger kept and
//! distlock.jobs: settled at most once per attempt, nothing lost, no limit
//! exceeded, nothing claimed for a dead client, and no runnable job left
//! waiting while a consumer of its queue waited idle.
//!
//! Runs only when DISTLOCK_QUEUE_SOAK_SECONDS is set (75 is a good default);
//! DISTLOCK_QUEUE_SOAK_SEED replays a run's choices (the nemesis', each
//! producer's and each consumer incarnation's; the timing differs).

#[path = "queue_checker.rs"]
mod queue_checker;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::ha::signal;
use crate::history::{history_path, outcome_of, Outcome};
use crate::support::*;
use queue_checker::{check, now_us, read_history, summary, Claim, FinalJob, JobRef, Op, Recorder, Run, Settle, MS, SECOND};

/// Set in a consumer process: "<index>.<incarnation>".
const CHILD_ENV: &str = "DISTLOCK_QUEUE_NEMESIS_CONSUMER";
const QUEUES: [&str; 4] = ["free", "limited", "pausable", "later"];
/// Consumers of `later` alone, after the others (see Consumer::round_later).
const LATER_CONSUMERS: usize = 6;

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name} is not a number: {v}")))
}

fn env_text(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"))
}

/// xorshift64*, as nemesis.rs: replayable from its seed.
struct Rng(u64);

impl Rng {
    /// A generator of its own for each process and role, from the run's seed.
    fn derived(seed: u64, stream: u64) -> Rng {
        let mut rng = Rng((seed ^ stream.wrapping_mul(0x9e37_79b9_7f4a_7c15)) | 1);
        rng.below(2);
        rng
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }

    fn percent(&mut self) -> u64 {
        self.below(100)
    }
}

/// The queues consumer `index` of `others` (the consumers not of `later`)
/// names. Each kind comes once in every eight consumers, so 8-20 of them
/// always cover all. None of them takes every queue (p_queues NULL): such
/// a consumer looks at each of the many wake-ups of the busy queues and
/// would take `later`'s jobs as they come due, hiding a due time that the
/// sleepers of `later` lost (directed tests cover that route).
fn queues_of(index: usize, others: usize) -> Option<Vec<String>> {
    if index >= others {
        return Some(vec!["later".to_string()]);
    }
    let names: &[&str] = match index % 8 {
        0 | 2 | 7 => &["free"],
        1 | 6 => &["limited"],
        3 => &["pausable"],
        4 => &["free", "pausable"],
        _ => &["pausable", "limited", "free"],
    };
    Some(names.iter().map(|n| n.to_string()).collect())
}

fn queues_text(queues: &Option<Vec<String>>) -> String {
    queues.as_ref().map_or("*".to_string(), |q| q.join(","))
}

fn pause(ms: u64) {
    thread::sleep(Duration::from_millis(ms)); // the work itself, or the time between operations
}

fn micros(row: &postgres::Row, column: usize) -> i64 {
    row.get::<_, Option<i64>>(column).unwrap_or(-1)
}

/// A server timestamp as microseconds since the epoch, the history's unit.
const LEASE_US: &str = "(extract(epoch FROM lease_expires_at) * 1000000)::int8";

// ---------------------------------------------------------------------------
// Consumers: one per process, so that SIGKILL kills a real client.

/// The hidden half of the soak: does nothing unless the soak started this
/// process as a consumer (CHILD_ENV), then consumes until killed.
#[test]
fn consumer_process() {
    let Ok(spec) = std::env::var(CHILD_ENV) else { return };
    let (index, incarnation) = spec.split_once('.').expect("index.incarnation");
    let (index, incarnation): (usize, u64) = (index.parse().expect("index"), incarnation.parse().expect("incarnation"));
    let seed = env_number("DISTLOCK_QUEUE_SOAK_SEED").expect("seed");
    let until = env_number("DISTLOCK_QUEUE_NEMESIS_UNTIL").expect("until") as i64;
    let others = env_number("DISTLOCK_QUEUE_NEMESIS_OTHERS").expect("others") as usize;
    let queues = queues_of(index, others);
    let mut consumer = Consumer {
        name: format!("qn-c{index}.{incarnation}"),
        conninfo: format!(
            "host=127.0.0.1 port={} user=postgres dbname={} connect_timeout=2",
            primary_port(),
            env_text("DISTLOCK_QUEUE_NEMESIS_DB")
        ),
        client: None,
        worker: String::new(),
        connections: 0,
        queues_text: queues_text(&queues),
        queues,
        rng: Rng::derived(seed, 1000 + index as u64 * 1000 + incarnation),
        history: Recorder::open(&env_text("DISTLOCK_QUEUE_NEMESIS_HISTORY")),
        held: Vec::new(),
        prepared: 0,
    };
    // The soak kills every consumer at its end; this bounds an orphan's life.
    while now_us() < until {
        if index >= others {
            consumer.round_later();
        } else {
            consumer.round();
        }
    }
}

struct Consumer {
    /// qn-c<index>.<incarnation>; each connection's worker id adds .<n>.
    name: String,
    conninfo: String,
    client: Option<Client>,
    worker: String,
    connections: u32,
    queues: Option<Vec<String>>,
    queues_text: String,
    rng: Rng,
    history: Recorder,
    /// Jobs claimed and not yet settled: (id, attempt).
    held: Vec<(i64, i32)>,
    prepared: u32,
}

const CONSUME_ONE: &str = "SELECT task_id, attempts, (extract(epoch FROM lease_expires_at) * 1000000)::int8 \
     FROM distlock.consume_task($1, $2::text::interval, $3::text::interval, $4::text[])";
const CONSUME_MANY: &str = "SELECT task_id, attempts, (extract(epoch FROM lease_expires_at) * 1000000)::int8 \
     FROM distlock.consume_tasks($5::int4, $1, $2::text::interval, $3::text::interval, $4::text[])";
const SETTLE_AND_CONSUME: &str = "SELECT task_id, attempts, (extract(epoch FROM lease_expires_at) * 1000000)::int8, outcome \
     FROM distlock.settle_and_consume_tasks($1::int4, $2, $3::int8[], $4::int4[], $5::int8[], $6::int4[], $7::text[], \
                                            $8::text::interval, $9::text::interval, $10::text[])";

impl Consumer {
    /// Reconnects when needed, as a new worker id.
    fn connected(&mut self) -> bool {
        if self.client.as_ref().is_some_and(|c| !c.is_closed()) {
            return true;
        }
        self.connections += 1;
        self.worker = format!("{}.{}", self.name, self.connections);
        self.client = Client::connect(&format!("{} application_name={}", self.conninfo, self.worker), NoTls).ok();
        self.held.clear(); // a broken connection's jobs are left to their leases
        self.client.is_some()
    }

    fn op(&self, kind: &str) -> Op {
        Op::new(&self.worker, kind, &self.queues_text, now_us())
    }

    fn finish<T>(&mut self, op: &mut Op, result: &Result<T, postgres::Error>) {
        op.end = now_us();
        let closed = self.client.as_ref().is_none_or(|c| c.is_closed());
        op.outcome = outcome_of(result, closed);
    }

    fn record(&mut self, op: Op) {
        if op.outcome == Outcome::Unknown {
            self.client = None;
        }
        self.history.record(op);
    }

    fn lease(&mut self) -> String {
        format!("{} milliseconds", 1000 + self.rng.below(2000))
    }

    /// Long waits, so that a consumer left asleep by a lost wake-up stays
    /// idle well past the checker's grace.
    fn wait(&mut self) -> (i64, String) {
        let ms = 2000 + self.rng.below(10_000) as i64;
        (ms, format!("{ms} milliseconds"))
    }

    fn round(&mut self) {
        if !self.connected() {
            return pause(100);
        }
        if !self.held.is_empty() {
            self.work();
            return if self.rng.below(2) == 0 { self.settle_and_consume() } else { self.settle_each(20) };
        }
        match self.rng.percent() {
            0..=44 => {
                self.consume(1, true);
            }
            45..=59 => {
                let batch = 2 + self.rng.below(3) as i32;
                self.consume(batch, true);
            }
            60..=71 => self.settle_and_consume(),
            72..=83 => {
                if !self.consume(1, false) {
                    pause(100 + self.rng.below(200));
                }
            }
            84..=91 => self.claim_rolled_back(),
            _ => self.claim_prepared(),
        }
    }

    /// A consumer of `later`: waits long for one job; takes it with a 16 s
    /// lease and works 2.5-3.5 s (busy while the job it may have learned of
    /// comes due), or with a 1-2 s lease and hangs past it (its job is taken
    /// over when the lease runs out), now and then dying instead (SIGKILL of
    /// its own process, a crashed holder). Then settles as the others do.
    fn round_later(&mut self) {
        if !self.connected() {
            return pause(100);
        }
        let hang = self.rng.percent() < 10;
        // A long lease outlasts every other sleeper's deadline (p_wait up to
        // 15 s), so that its claim's commit wakes none of them (each would
        // learn the next due time again at that look).
        let lease_ms = if hang { 1000 + self.rng.below(1000) } else { 16_000 };
        let lease = format!("{lease_ms} milliseconds");
        let wait_ms = 10_000 + self.rng.below(5000) as i64;
        let wait = Some(format!("{wait_ms} milliseconds"));
        let mut op = self.op("consume");
        op.wait_ms = wait_ms;
        op.note = "consume_task".to_string();
        let Some(client) = self.client.as_mut() else { return };
        let result = client.query(CONSUME_ONE, &[&self.worker, &lease, &wait, &self.queues]);
        self.finish(&mut op, &result);
        op.jobs = result.map(|rows| Self::rows_to_jobs(&rows)).unwrap_or_default();
        self.held.extend(op.jobs.iter().map(|j| (j.id, j.attempt)));
        let got = !op.jobs.is_empty();
        self.record(op);
        if !got {
            return;
        }
        if hang && self.rng.percent() < 25 {
            let mut op = Op::new(&self.name, "sigkill", "*", now_us());
            op.note = "itself, holding a job".to_string();
            self.history.record(op);
            signal(std::process::id() as i32, "-KILL");
            pause(10_000); // SIGKILL arrives meanwhile
        }
        pause(if hang { lease_ms + 1500 } else { 2500 + self.rng.below(1000) });
        // No failures: a retry comes due 5-10 s later, at no set time, and
        // the consumer that learns of it looks again then, and learns the
        // bursts' due times (the other queues retry).
        self.settle_each(0);
    }

    /// The job's work; now and then longer than its lease (a hung consumer).
    fn work(&mut self) {
        if self.rng.percent() < 8 {
            pause(3300);
        } else {
            pause(self.rng.below(300));
        }
    }

    fn rows_to_jobs(rows: &[postgres::Row]) -> Vec<JobRef> {
        rows.iter().map(|r| JobRef { id: r.get(0), attempt: r.get(1), at: micros(r, 2) }).collect()
    }

    /// consume_task (batch 1) or consume_tasks; true when it got jobs.
    fn consume(&mut self, batch: i32, waiting: bool) -> bool {
        let lease = self.lease();
        let (wait_ms, wait) = if waiting { self.wait() } else { (0, String::new()) };
        let wait = waiting.then_some(wait);
        let mut op = self.op("consume");
        op.wait_ms = wait_ms;
        op.note = if batch == 1 { "consume_task".to_string() } else { format!("consume_tasks({batch})") };
        let Some(client) = self.client.as_mut() else { return false };
        let result = if batch == 1 {
            client.query(CONSUME_ONE, &[&self.worker, &lease, &wait, &self.queues])
        } else {
            client.query(CONSUME_MANY, &[&self.worker, &lease, &wait, &self.queues, &batch])
        };
        self.finish(&mut op, &result);
        op.jobs = result.map(|rows| Self::rows_to_jobs(&rows)).unwrap_or_default();
        self.held.extend(op.jobs.iter().map(|j| (j.id, j.attempt)));
        let got = !op.jobs.is_empty();
        self.record(op);
        got
    }

    /// Which held jobs fail (one in five) and which complete.
    fn split_held(&mut self, fail_percent: u64) -> (Vec<(i64, i32)>, Vec<(i64, i32)>) {
        let held = std::mem::take(&mut self.held);
        held.into_iter().partition(|_| self.rng.percent() >= fail_percent)
    }

    /// When each failed job's retry is due (status failed), -1 when dead or unread.
    fn retry_times(&mut self, ids: &[i64]) -> HashMap<i64, i64> {
        let Some(client) = self.client.as_mut() else { return HashMap::new() };
        client
            .query(
                "SELECT id, (extract(epoch FROM run_after) * 1000000)::int8 FROM distlock.task_queue \
                  WHERE id = ANY($1) AND status = 'failed'",
                &[&ids],
            )
            .map(|rows| rows.iter().map(|r| (r.get(0), r.get(1))).collect())
            .unwrap_or_default()
    }

    /// Settles what it holds and claims its next job in one call (waiting
    /// only when it settled nothing, as the function does).
    fn settle_and_consume(&mut self) {
        let (completed, failed) = self.split_held(20);
        let lease = self.lease();
        let (wait_ms, wait) = self.wait();
        let batch = 1 + self.rng.below(2) as i32;
        let mut op = self.op("consume");
        op.wait_ms = wait_ms;
        op.note = format!("settle_and_consume_tasks({batch})");
        let ids = |jobs: &[(i64, i32)]| (!jobs.is_empty()).then(|| jobs.iter().map(|j| j.0).collect::<Vec<i64>>());
        let attempts = |jobs: &[(i64, i32)]| (!jobs.is_empty()).then(|| jobs.iter().map(|j| j.1).collect::<Vec<i32>>());
        let errors = (!failed.is_empty()).then(|| vec!["nemesis".to_string(); failed.len()]);
        let Some(client) = self.client.as_mut() else { return };
        let result = client.query(
            SETTLE_AND_CONSUME,
            &[
                &batch,
                &self.worker,
                &ids(&completed),
                &attempts(&completed),
                &ids(&failed),
                &attempts(&failed),
                &errors,
                &lease,
                &Some(wait),
                &self.queues,
            ],
        );
        self.finish(&mut op, &result);
        let rows = result.unwrap_or_default();
        let refused: HashSet<(i64, i32)> =
            rows.iter().filter(|r| r.get::<_, Option<String>>(3).as_deref() == Some("refused")).map(|r| (r.get(0), r.get(1))).collect();
        let claimed: Vec<postgres::Row> = rows.into_iter().filter(|r| r.get::<_, Option<String>>(3).as_deref() == Some("claimed")).collect();
        op.jobs = Self::rows_to_jobs(&claimed);
        let retries = if op.acked() && !failed.is_empty() { self.retry_times(&ids(&failed).unwrap_or_default()) } else { HashMap::new() };
        for (jobs, result) in [(&completed, 'c'), (&failed, 'f')] {
            for &(id, attempt) in jobs {
                let result = if refused.contains(&(id, attempt)) { 'r' } else { result };
                let run_after = retries.get(&id).copied().unwrap_or(-1);
                op.settles.push(Settle { id, attempt, result, run_after });
            }
        }
        self.held.extend(op.jobs.iter().map(|j| (j.id, j.attempt)));
        self.record(op);
    }

    /// complete_task or fail_task (reading the retry's due time back in
    /// its transaction) for each held job, with its attempt.
    fn settle_each(&mut self, fail_percent: u64) {
        let (completed, failed) = self.split_held(fail_percent);
        for (id, attempt) in completed {
            let mut op = self.op("complete");
            let Some(client) = self.client.as_mut() else { return };
            let result = client.query_one("SELECT distlock.complete_task($1, $2, $3)", &[&id, &self.worker, &attempt]);
            self.finish(&mut op, &result);
            let done = result.as_ref().map(|r| r.get::<_, bool>(0)).unwrap_or(true);
            op.settles.push(Settle { id, attempt, result: if done { 'c' } else { 'r' }, run_after: -1 });
            self.record(op);
        }
        for (id, attempt) in failed {
            let mut op = self.op("fail");
            let Some(client) = self.client.as_mut() else { return };
            let result = client.transaction().and_then(|mut tx| {
                let failed: bool =
                    tx.query_one("SELECT distlock.fail_task($1, 'nemesis', $2, $3)", &[&id, &self.worker, &attempt])?.get(0);
                let retry = tx
                    .query_opt(
                        "SELECT (extract(epoch FROM run_after) * 1000000)::int8 FROM distlock.task_queue WHERE id = $1 AND status = 'failed'",
                        &[&id],
                    )?
                    .map(|r| r.get::<_, i64>(0));
                tx.commit().map(|_| (failed, retry))
            });
            self.finish(&mut op, &result);
            let (failed, retry) = result.as_ref().map(|r| (r.0, r.1)).unwrap_or((true, None));
            op.settles.push(Settle { id, attempt, result: if failed { 'f' } else { 'r' }, run_after: retry.unwrap_or(-1) });
            self.record(op);
        }
    }

    /// A claim rolled back to a savepoint: the job goes back at once.
    fn claim_rolled_back(&mut self) {
        let lease = self.lease();
        let mut op = self.op("claim-rolled-back");
        let Some(client) = self.client.as_mut() else { return };
        let result = client.transaction().and_then(|mut tx| {
            tx.batch_execute("SAVEPOINT before_claim")?;
            let rows = tx.query(CONSUME_ONE, &[&self.worker, &lease, &None::<String>, &self.queues])?;
            tx.batch_execute("ROLLBACK TO SAVEPOINT before_claim")?;
            tx.commit().map(|_| rows)
        });
        self.finish(&mut op, &result);
        op.jobs = result.map(|rows| Self::rows_to_jobs(&rows)).unwrap_or_default();
        self.record(op);
    }

    /// A claim in a prepared transaction, committed (7 in 10) or rolled
    /// back by this consumer at once, or by the keeper when this one dies.
    fn claim_prepared(&mut self) {
        let lease = self.lease();
        self.prepared += 1;
        let gid = format!("qn-claim-{}-{}", self.worker, self.prepared);
        let mut op = self.op("claim-prepared");
        op.note = gid.clone();
        let Some(client) = self.client.as_mut() else { return };
        let result = client.batch_execute("BEGIN").and_then(|_| {
            let rows = client.query(CONSUME_ONE, &[&self.worker, &lease, &None::<String>, &self.queues])?;
            client.batch_execute(&format!("PREPARE TRANSACTION '{gid}'")).map(|_| rows)
        });
        if result.is_err() && !client.is_closed() {
            let _ = client.batch_execute("ROLLBACK"); // a refused PREPARE (all slots taken) left the block open
        }
        self.finish(&mut op, &result);
        op.jobs = result.map(|rows| Self::rows_to_jobs(&rows)).unwrap_or_default();
        let (prepared, jobs) = (op.acked(), op.jobs.clone());
        self.record(op);
        if !prepared {
            return;
        }
        pause(self.rng.below(100));
        let commit = self.rng.percent() < 70;
        let mut op = self.op(if commit { "commit-prepared" } else { "rollback-prepared" });
        op.note = gid.clone();
        op.jobs = jobs.clone();
        let Some(client) = self.client.as_mut() else { return };
        let result = client.batch_execute(&format!("{} PREPARED '{gid}'", if commit { "COMMIT" } else { "ROLLBACK" }));
        self.finish(&mut op, &result);
        if commit && op.acked() {
            self.held.extend(jobs.iter().map(|j| (j.id, j.attempt)));
        }
        self.record(op);
    }
}

// ---------------------------------------------------------------------------
// Producers, the keeper and the nemesis: threads of the test itself.

struct Producer {
    name: String,
    conninfo: String,
    client: Option<Client>,
    rng: Rng,
    history: Recorder,
    prepared: u32,
}

const ENQUEUE: &str = "SELECT distlock.enqueue_task('qn', '{}'::jsonb, to_timestamp($1::int8::float8 / 1000000), 0, $2::int4, $3, $4)";

impl Producer {
    fn connected(&mut self) -> bool {
        if self.client.as_ref().is_none_or(|c| c.is_closed()) {
            self.client = Client::connect(&format!("{} application_name={}", self.conninfo, self.name), NoTls).ok();
        }
        self.client.is_some()
    }

    /// A burst into `later`, as liveness.rs's directed test of defect 4: a
    /// job due in 0.8-1.5 s (seven times in ten) or an immediate one, then,
    /// 150-400 ms later (the consumer woken for the first has looked and
    /// slept again), an immediate one, which may wake the consumer that
    /// learned of the first job's due time (or of a holder's short lease);
    /// that one then works for seconds while others wait idle. Then a quiet
    /// of 4.5-6 s, longer than any job's work, so that no consumer of
    /// `later` comes back from one and looks (and so learns every due time)
    /// in the next burst's first seconds.
    fn round_later(&mut self) {
        if !self.connected() {
            return pause(100);
        }
        let now = now_us();
        let run_after = if self.rng.percent() < 70 { now + (800 + self.rng.below(700) as i64) * MS } else { now };
        self.enqueue("later", run_after, 3, None);
        pause(150 + self.rng.below(250));
        self.enqueue("later", now_us(), 3, None);
        pause(4500 + self.rng.below(1500));
    }

    /// One enqueue: into `free` (half), `limited` (a fifth: it drains
    /// slowly) or `pausable`; immediate, delayed, with a unique key
    /// (immediate, so a merge says nothing of when the job runs) or in a
    /// prepared transaction. About 7 jobs a second from two producers, so
    /// that consumers are often idle waiters: the liveness check needs them.
    fn round(&mut self) {
        pause(100 + self.rng.below(400));
        if !self.connected() {
            return pause(100);
        }
        let queue = match self.rng.percent() {
            0..=49 => "free",
            50..=69 => "limited",
            _ => "pausable",
        };
        let max_attempts = 1 + self.rng.below(3) as i32;
        let kind = self.rng.percent();
        let start = now_us();
        let run_after = if (50..78).contains(&kind) { start + (300 + self.rng.below(3700) as i64) * MS } else { start };
        let key = (78..90).contains(&kind).then(|| format!("key-{}", self.rng.below(6)));
        if kind >= 90 {
            self.prepared += 1;
            let gid = format!("qn-enq-{}-{}", self.name, self.prepared);
            let mut op = Op::new(&self.name, "enqueue-prepared", queue, start);
            op.note = gid.clone();
            let Some(client) = self.client.as_mut() else { return };
            let result = client.batch_execute("BEGIN").and_then(|_| {
                let id: i64 = client.query_one(ENQUEUE, &[&run_after, &max_attempts, &queue, &key])?.get(0);
                client.batch_execute(&format!("PREPARE TRANSACTION '{gid}'")).map(|_| id)
            });
            if result.is_err() && !client.is_closed() {
                let _ = client.batch_execute("ROLLBACK");
            }
            op.end = now_us();
            op.outcome = outcome_of(&result, client.is_closed());
            let Ok(id) = result else { return self.record(op) };
            op.jobs.push(JobRef { id, attempt: max_attempts, at: run_after });
            let jobs = op.jobs.clone();
            self.record(op);
            pause(self.rng.below(50));
            let commit = self.rng.percent() < 85;
            let mut op = Op::new(&self.name, if commit { "commit-prepared" } else { "rollback-prepared" }, queue, now_us());
            op.note = gid.clone();
            op.jobs = jobs;
            let Some(client) = self.client.as_mut() else { return };
            let result = client.batch_execute(&format!("{} PREPARED '{gid}'", if commit { "COMMIT" } else { "ROLLBACK" }));
            op.end = now_us();
            op.outcome = outcome_of(&result, client.is_closed());
            return self.record(op);
        }
        self.enqueue(queue, run_after, max_attempts, key);
    }

    /// One enqueue in its own transaction, recorded with whether it queued
    /// the job or found its key's job (a job this transaction made has its
    /// start as created_at).
    fn enqueue(&mut self, queue: &str, run_after: i64, max_attempts: i32, key: Option<String>) {
        let mut op = Op::new(&self.name, "enqueue", queue, now_us());
        let Some(client) = self.client.as_mut() else { return };
        let result = client.transaction().and_then(|mut tx| {
            let id: i64 = tx.query_one(ENQUEUE, &[&run_after, &max_attempts, &queue, &key])?.get(0);
            let made: bool = tx.query_one("SELECT created_at = now() FROM distlock.jobs WHERE id = $1", &[&id])?.get(0);
            tx.commit().map(|_| (id, made))
        });
        op.end = now_us();
        op.outcome = outcome_of(&result, client.is_closed());
        if let Ok((id, made)) = result {
            op.jobs.push(JobRef { id, attempt: max_attempts, at: run_after });
            if !made {
                op.note = "merged".to_string();
            }
        }
        self.record(op);
    }

    fn record(&mut self, op: Op) {
        if op.outcome == Outcome::Unknown {
            self.client = None;
        }
        self.history.record(op);
    }
}

/// Resolves prepared transactions left by clients that died (older than a
/// second): enqueues are committed, claims rolled back. With `all`, every
/// one of the run's, whatever its age.
fn resolve_orphans(c: &mut Client, history: &mut Recorder, all: bool) {
    let orphans = c.query(
        "SELECT gid, (extract(epoch FROM prepared) * 1000000)::int8 FROM pg_prepared_xacts \
          WHERE database = current_database() AND gid LIKE 'qn-%' AND (prepared < now() - interval '1 second' OR $1)",
        &[&all],
    );
    for row in orphans.unwrap_or_default() {
        let (gid, prepared): (String, i64) = (row.get(0), row.get(1));
        let commit = gid.starts_with("qn-enq-");
        let mut op = Op::new("keeper", if commit { "commit-prepared" } else { "rollback-prepared" }, "*", prepared);
        op.note = gid.clone();
        let result = c.batch_execute(&format!("{} PREPARED '{gid}'", if commit { "COMMIT" } else { "ROLLBACK" }));
        op.end = now_us();
        op.outcome = outcome_of(&result, c.is_closed());
        history.record(op);
    }
}

fn keeper(conninfo: String, history: String, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let mut history = Recorder::open(&history);
        let mut client: Option<Client> = None;
        loop {
            let stopping = stop.load(Ordering::Relaxed);
            if client.as_ref().is_none_or(|c| c.is_closed()) {
                client = Client::connect(&format!("{conninfo} application_name=qn-keeper"), NoTls).ok();
            }
            if let Some(c) = client.as_mut() {
                resolve_orphans(c, &mut history, stopping);
            }
            if stopping {
                return;
            }
            pause(250); // the keeper's period
        }
    })
}

/// A frozen backend is thawed even if the test fails meanwhile.
struct Frozen(i32);

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-CONT", &self.0.to_string()]).status();
    }
}

/// The consumer processes, killed when dropped.
struct Consumers {
    children: Vec<(Child, u64)>,
    env: Vec<(String, String)>,
}

impl Consumers {
    fn spawn(&self, index: usize, incarnation: u64) -> Child {
        Command::new(std::env::current_exe().expect("test binary"))
            .args(["--exact", "queue_nemesis::consumer_process", "--test-threads=1", "--nocapture"])
            .env(CHILD_ENV, format!("{index}.{incarnation}"))
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("consumer process")
    }

    /// Starts the next incarnation of each consumer that ended (one of
    /// `later` that killed itself).
    fn restart_exited(&mut self) {
        for index in 0..self.children.len() {
            if matches!(self.children[index].0.try_wait(), Ok(Some(_))) {
                let incarnation = self.children[index].1 + 1;
                self.children[index] = (self.spawn(index, incarnation), incarnation);
            }
        }
    }

    /// SIGKILLs consumer `index` and starts its next incarnation; returns
    /// the incarnation killed.
    fn kill_and_restart(&mut self, index: usize) -> u64 {
        let incarnation = self.children[index].1;
        let _ = self.children[index].0.kill();
        let _ = self.children[index].0.wait();
        self.children[index] = (self.spawn(index, incarnation + 1), incarnation + 1);
        incarnation
    }
}

impl Drop for Consumers {
    fn drop(&mut self) {
        for (child, _) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Backends of the run whose application_name starts with `prefix`: (pid, name).
fn backends(c: &mut Client, prefix: &str) -> Vec<(i32, String)> {
    c.query(
        "SELECT pid, application_name FROM pg_stat_activity WHERE datname = current_database() \
          AND starts_with(application_name, $1) ORDER BY application_name",
        &[&prefix],
    )
    .map(|rows| rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    .unwrap_or_default()
}

/// The claim log: one row per committed claim, in the claim's own
/// transaction (a claim deletes the runnable row and inserts the claimed one).
const CLAIM_LOG: &str = "\
    CREATE TABLE claim_log (id bigint, attempt int, worker text, queue text, at int8, lease int8); \
    CREATE FUNCTION log_claim() RETURNS trigger LANGUAGE plpgsql AS $$ \
    BEGIN \
      IF NEW.status = 'processing' AND (TG_OP = 'INSERT' OR OLD.status <> 'processing' OR OLD.attempts <> NEW.attempts) THEN \
        INSERT INTO public.claim_log VALUES (NEW.id, NEW.attempts, NEW.worker_id, NEW.queue, \
          (extract(epoch FROM clock_timestamp()) * 1000000)::int8, (extract(epoch FROM NEW.lease_expires_at) * 1000000)::int8); \
      END IF; \
      RETURN NULL; \
    END $$; \
    CREATE TRIGGER log_claim AFTER INSERT OR UPDATE ON distlock.task_queue FOR EACH ROW EXECUTE FUNCTION log_claim();";

#[test]
fn queue_jobs_survive_a_nemesis_settled_once_within_limits_and_handed_out_in_time() {
    let Some(seconds) = env_number("DISTLOCK_QUEUE_SOAK_SECONDS") else {
        eprintln!("queue nemesis soak: skipped, DISTLOCK_QUEUE_SOAK_SECONDS is not set (75 is a good value)");
        return;
    };
    let seed = env_number("DISTLOCK_QUEUE_SOAK_SEED").unwrap_or_else(|| now_us() as u64 | 1);
    let mut rng = Rng::derived(seed, 0);
    let others = 8 + rng.below(13) as usize;
    let consumers_n = others + LATER_CONSUMERS;
    let limit = 1 + rng.below(2) as i64;
    eprintln!("queue nemesis soak: {seconds} s, {others} + {LATER_CONSUMERS} consumers, limit {limit}, DISTLOCK_QUEUE_SOAK_SEED={seed}");

    let db = fresh_db("queue_nemesis");
    let mut admin = connect(&db);
    admin.batch_execute(CLAIM_LOG).expect("claim log");
    admin.batch_execute(&format!("SELECT distlock.set_queue_limit('limited', {limit})")).expect("limit");
    let path = history_path("queue-nemesis");
    std::fs::write(&path, "").expect("history file");
    let conninfo = format!("host=127.0.0.1 port={} user=postgres dbname={db} connect_timeout=2", primary_port());
    let until = now_us() + seconds as i64 * SECOND;

    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..3)
        .map(|i| {
            let mut p = Producer {
                name: format!("qn-producer-{i}"),
                conninfo: conninfo.clone(),
                client: None,
                rng: Rng::derived(seed, 100 + i),
                history: Recorder::open(&path),
                prepared: 0,
            };
            let stop = stop.clone();
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // The third producer feeds `later` alone.
                    if i == 2 {
                        p.round_later();
                    } else {
                        p.round();
                    }
                }
            })
        })
        .collect();
    let stop_keeper = Arc::new(AtomicBool::new(false));
    let keeper = keeper(conninfo.clone(), path.clone(), stop_keeper.clone());
    let mut consumers = Consumers {
        children: Vec::new(),
        env: vec![
            ("DISTLOCK_QUEUE_SOAK_SEED".into(), seed.to_string()),
            ("DISTLOCK_QUEUE_NEMESIS_UNTIL".into(), (until + 30 * SECOND).to_string()),
            ("DISTLOCK_QUEUE_NEMESIS_DB".into(), db.clone()),
            ("DISTLOCK_QUEUE_NEMESIS_HISTORY".into(), path.clone()),
            ("DISTLOCK_QUEUE_NEMESIS_OTHERS".into(), others.to_string()),
        ],
    };
    for i in 0..consumers_n {
        let child = consumers.spawn(i, 0);
        consumers.children.push((child, 0));
    }

    let mut history = Recorder::open(&path);
    let nemesis_client = || {
        let mut nemesis = connect_to(primary_port(), &db, "qn-nemesis");
        // DDL that cannot have its lock within a second gives up: the time it
        // queues for its lock holds every claim up behind it, which the checker
        // must excuse, and a wait that held a lock through its sleep (0.3.0)
        // made that the sleeper's whole p_wait, excusing nearly the whole run.
        nemesis.batch_execute("SET statement_timeout = '20s'; SET lock_timeout = '1s'").expect("timeout");
        nemesis
    };
    let mut nemesis = nemesis_client();
    let mut faults: BTreeMap<&str, usize> = BTreeMap::new();
    while now_us() < until {
        pause(150 + rng.below(500)); // the time between faults
        consumers.restart_exited();
        let fault = rng.percent();
        // Consumers of `later` are left alone: a restarted one looks at once
        // (learning every due time), and one killed holding a long lease
        // leaves its job for 16 s; they crash by themselves.
        let index = rng.below(others as u64) as usize;
        if nemesis.is_closed() {
            nemesis = nemesis_client();
        }
        let name = match fault {
            0..=34 => {
                let mut op = Op::new("", "sigkill", "*", now_us());
                let incarnation = consumers.kill_and_restart(index);
                op.actor = format!("qn-c{index}.{incarnation}");
                op.end = now_us();
                history.record(op);
                "SIGKILL of a consumer process"
            }
            35..=54 => {
                let Some((pid, worker)) = backends(&mut nemesis, &format!("qn-c{index}.")).pop() else { continue };
                let mut op = Op::new(&worker, "terminate", "*", now_us());
                op.note = pid.to_string();
                let result = nemesis.execute("SELECT pg_terminate_backend($1)", &[&pid]);
                op.end = now_us();
                op.outcome = outcome_of(&result, nemesis.is_closed());
                history.record(op);
                "pg_terminate_backend of a consumer"
            }
            55..=62 => {
                let prefix = if rng.below(4) == 0 { "qn-producer-".to_string() } else { format!("qn-c{index}.") };
                let frozen_ms = 200 + rng.below(1000);
                let Some((pid, who)) = backends(&mut nemesis, &prefix).pop() else { continue };
                let mut op = Op::new(&who, "sigstop", "*", now_us());
                op.note = pid.to_string();
                signal(pid, "-STOP");
                let thaw = Frozen(pid);
                pause(frozen_ms);
                drop(thaw);
                op.end = now_us();
                history.record(op);
                "SIGSTOP of a backend"
            }
            63..=68 => {
                let held_ms = 200 + rng.below(800);
                let (label, sql) = match rng.below(3) {
                    0 => ("ALTER TABLE fillfactor", format!("ALTER TABLE distlock.task_queue SET (fillfactor = {})", 70 + rng.below(31))),
                    1 => ("VACUUM FULL", "VACUUM FULL distlock.task_queue".to_string()),
                    _ => ("LOCK TABLE", format!("BEGIN; LOCK TABLE distlock.task_queue IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep({held_ms} / 1000.0); COMMIT")),
                };
                let mut op = Op::new("nemesis", "ddl", "*", now_us());
                op.note = sql.clone();
                let result = nemesis.batch_execute(&sql);
                if result.is_err() && !nemesis.is_closed() {
                    let _ = nemesis.batch_execute("ROLLBACK");
                }
                op.end = now_us();
                op.outcome = outcome_of(&result, nemesis.is_closed());
                history.record(op);
                label
            }
            69..=78 => {
                let paused_ms = 300 + rng.below(2500);
                for (kind, sql) in [("pause", "SELECT distlock.pause_queue('pausable')"), ("resume", "SELECT distlock.resume_queue('pausable')")] {
                    let mut op = Op::new("nemesis", kind, "pausable", now_us());
                    let result = nemesis.batch_execute(sql);
                    op.end = now_us();
                    op.outcome = outcome_of(&result, nemesis.is_closed());
                    history.record(op);
                    if kind == "pause" {
                        pause(paused_ms);
                    }
                }
                "pause and resume"
            }
            _ => continue,
        };
        *faults.entry(name).or_default() += 1;
    }

    // Stop: producers first, then every consumer (their jobs are left to
    // their leases), then the keeper with a last resolution of every
    // prepared transaction; and the pausable queue runs again.
    let stopped = now_us();
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.join().expect("producer");
    }
    drop(consumers);
    stop_keeper.store(true, Ordering::Relaxed);
    keeper.join().expect("keeper");
    let mut admin = connect(&db);
    admin.batch_execute("SELECT distlock.resume_queue('pausable')").expect("resume");
    // Up to a consumer of `later`'s whole p_wait and lease (15 + 16 s): a
    // backend that goes on waiting after its client died (0.3.0) claims then.
    eventually("every lease to run out", Duration::from_secs(40), || {
        count(&mut admin, "SELECT 1 FROM distlock.task_queue WHERE status = 'processing' AND lease_expires_at > now()") == 0
    });
    let read_at = now_us();

    let claims: Vec<Claim> = admin
        .query("SELECT id, attempt, worker, queue, at, lease FROM claim_log ORDER BY at", &[])
        .expect("claim log")
        .iter()
        .map(|r| Claim { id: r.get(0), attempt: r.get(1), worker: r.get(2), queue: r.get(3), at: r.get(4), lease: r.get(5) })
        .collect();
    let jobs: HashMap<i64, FinalJob> = admin
        .query(&format!("SELECT id, status::text, attempts, {LEASE_US} FROM distlock.jobs"), &[])
        .expect("jobs")
        .iter()
        .map(|r| (r.get(0), FinalJob { status: r.get(1), attempts: r.get(2), lease: r.get(3) }))
        .collect();
    let ops = read_history(&path);
    let run = Run { limits: BTreeMap::from([("limited".to_string(), limit)]), stopped, read_at };
    let mut statuses: BTreeMap<&str, usize> = BTreeMap::new();
    for job in jobs.values() {
        *statuses.entry(job.status.as_str()).or_default() += 1;
    }
    eprintln!(
        "queue nemesis soak: faults {faults:?}\njobs {statuses:?}, {} claims\nhistory {path}: {}",
        claims.len(),
        summary(&ops)
    );
    let violations = check(&ops, &claims, &jobs, &run);
    assert!(
        violations.is_empty(),
        "{} violations (DISTLOCK_QUEUE_SOAK_SEED={seed}), history in {path}:\n{}",
        violations.len(),
        violations.join("\n")
    );
    assert!(jobs.len() >= 100 && claims.len() >= 100, "enough jobs and claims to mean something ({} jobs, {} claims)", jobs.len(), claims.len());
    for queue in QUEUES {
        assert!(claims.iter().any(|c| c.queue == queue), "no job of queue {queue} was ever claimed");
    }
    if seconds >= 60 {
        for fault in ["SIGKILL of a consumer process", "pg_terminate_backend of a consumer", "SIGSTOP of a backend", "pause and resume"] {
            assert!(faults.contains_key(fault), "the nemesis never tried {fault}: {faults:?}");
        }
    }
}
