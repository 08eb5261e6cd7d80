//! A fleet of worker threads doing what users of pg_distlock do, each
//! operation recorded in a History: fenced read-modify-write of a counter
//! row under session claims, lease-mode claims, leases and leaderships, and
//! queue jobs completed with their result. Workers reconnect by themselves
//! (through a multi-host conninfo, after a failover) and go on until stopped.
//!
//! The fenced write, as docs/tasks.md (Fencing) advises: in one
//! transaction, read the counter under a row lock, write n + 1 with the
//! token, and let a trigger refuse a token that is not the resource's
//! current one or is lower than the counter has already seen. For task
//! claims the release joins the same transaction, so a slot's result and
//! its completion commit together.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use postgres::Transaction;

use crate::history::{outcome_of, History, Outcome};
use crate::support::*;

pub const HOLD: &str = "2 seconds";

/// Counters, the log of applied writes, the fence and the queue's results;
/// `tasks` tasks due now (task ids 1..), and `jobs` queued jobs.
pub fn prepare(c: &mut Client, tasks: i32, leases: &[&str], groups: &[&str], jobs: i32) {
    c.batch_execute(&format!(
        "CREATE TABLE counters (resource text PRIMARY KEY, n bigint NOT NULL DEFAULT 0, token bigint NOT NULL DEFAULT 0); \
         CREATE TABLE applied (seq bigserial PRIMARY KEY, op bigint NOT NULL, resource text NOT NULL, token bigint NOT NULL, \
                               n_before bigint NOT NULL, n_after bigint NOT NULL, slot timestamptz); \
         CREATE TABLE done (job bigint NOT NULL, op bigint NOT NULL); \
         CREATE FUNCTION fence() RETURNS trigger LANGUAGE plpgsql AS $$ \
         DECLARE kind text := split_part(NEW.resource, ':', 1); name text := split_part(NEW.resource, ':', 2); \
         BEGIN \
           IF NEW.token < OLD.token OR NOT (CASE kind \
               WHEN 'task' THEN distlock.check_fencing_token(name::int, NEW.token) \
               WHEN 'lease' THEN distlock.check_lease_token(name, NEW.token) \
               WHEN 'election' THEN EXISTS (SELECT 1 FROM distlock.leaders \
                                             WHERE group_name = name AND term = NEW.token AND is_current) \
               ELSE false END) THEN \
             RAISE EXCEPTION 'stale token % for %', NEW.token, NEW.resource USING ERRCODE = '40001'; \
           END IF; \
           RETURN NEW; \
         END $$; \
         CREATE TRIGGER fence BEFORE UPDATE ON counters FOR EACH ROW EXECUTE FUNCTION fence(); \
         INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at, timeout, retry_delay) \
           SELECT 'task-' || i, 'fleet', '0 0 1 1 *', now(), '3 seconds', '1 millisecond' FROM generate_series(1, {tasks}) i; \
         INSERT INTO counters (resource) SELECT 'task:' || id FROM distlock.scheduled_tasks; \
         INSERT INTO counters (resource) SELECT 'lease:' || unnest(ARRAY[{}]::text[]); \
         INSERT INTO counters (resource) SELECT 'election:' || unnest(ARRAY[{}]::text[]); \
         SELECT distlock.enqueue_task('fleet-job') FROM generate_series(1, {jobs});",
        quoted(leases),
        quoted(groups),
    ))
    .expect("fleet schema");
}

fn quoted(names: &[&str]) -> String {
    names.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(",")
}

#[derive(Clone, Copy)]
pub enum Role {
    SessionClaims,
    LeaseClaims,
    Lease(&'static str),
    Election(&'static str),
    Queue,
}

pub struct Fleet {
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
    losses: Losses,
}

/// How a task holder's connection gives its advisory locks up behind
/// pg_distlock's back, as a pooler's reset or an application does, and
/// what the holder tries afterwards with the token it still carries.
#[derive(Clone, Copy, Debug)]
pub struct Loss {
    /// pg_advisory_unlock_all() rather than DISCARD ALL.
    pub unlock_all: bool,
    /// Release alone first (then the write alone), rather than the fenced
    /// write with the release in its transaction.
    pub release_first: bool,
    /// How long the holder waits after the loss, so that another worker
    /// sometimes claims the task before it tries (ms).
    pub linger_ms: u64,
}

/// Losses asked for, taken by the next claim of a task-claiming worker.
type Losses = Arc<Mutex<Vec<Loss>>>;

impl Fleet {
    /// One thread per role, connecting with `conninfo` (without application_name).
    pub fn start(conninfo: &str, roles: &[Role], history: &Arc<History>) -> Fleet {
        let stop = Arc::new(AtomicBool::new(false));
        let losses: Losses = Arc::default();
        let workers = roles
            .iter()
            .enumerate()
            .map(|(i, &role)| {
                let mut w = Worker::new(conninfo, &format!("fleet-{i}"), history);
                let stop = stop.clone();
                let losses = losses.clone();
                thread::spawn(move || {
                    let mut rounds = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        if !w.connected() {
                            thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                        rounds += 1;
                        match role {
                            Role::SessionClaims => task_round(&mut w, false, &losses),
                            Role::LeaseClaims => task_round(&mut w, true, &losses),
                            Role::Lease(name) => lease_round(&mut w, name),
                            Role::Election(group) => election_round(&mut w, group, rounds),
                            Role::Queue => queue_round(&mut w),
                        }
                    }
                })
            })
            .collect();
        Fleet { stop, workers, losses }
    }

    /// The next task claim a worker makes is lost as `loss` says, right
    /// after it was granted (see task_round).
    pub fn lose_a_claim(&self, loss: Loss) {
        self.losses.lock().expect("losses").push(loss);
    }

    pub fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for w in self.workers {
            w.join().expect("fleet worker");
        }
    }
}

/// One connection and its recorder. The port is the server's, read after
/// each connect, so the history tells which node answered.
pub struct Worker {
    pub name: String,
    conninfo: String,
    history: Arc<History>,
    client: Option<Client>,
    port: u16,
}

impl Worker {
    pub fn new(conninfo: &str, name: &str, history: &Arc<History>) -> Worker {
        Worker {
            name: name.to_string(),
            conninfo: format!("{conninfo} application_name={name}"),
            history: history.clone(),
            client: None,
            port: 0,
        }
    }

    /// Reconnects when needed (one attempt); false while the server is away.
    pub fn connected(&mut self) -> bool {
        if self.client.as_ref().is_some_and(|c| !c.is_closed()) {
            return true;
        }
        self.client = Client::connect(&self.conninfo, NoTls).ok();
        let port = self.client.as_mut().and_then(|c| c.query_one("SELECT inet_server_port()", &[]).ok());
        match port {
            Some(row) => self.port = row.get::<_, i32>(0) as u16,
            None => self.client = None,
        }
        self.client.is_some()
    }

    /// Runs `f` in one transaction and records it with `token`, or with the
    /// token `f` returns; returns `f`'s value when it committed.
    fn run<T>(
        &mut self,
        kind: &str,
        resource: &str,
        token: impl Fn(&T) -> Option<i64>,
        f: impl FnOnce(&mut Transaction) -> Result<T, postgres::Error>,
    ) -> Option<T> {
        let op = self.history.begin();
        let client = self.client.as_mut()?;
        let result = client.transaction().and_then(|mut tx| {
            let value = f(&mut tx)?;
            tx.commit().map(|_| value)
        });
        let outcome = outcome_of(&result, client.is_closed());
        self.record(op, kind, resource, result.as_ref().ok().and_then(token), outcome);
        result.ok()
    }

    /// A grant: `sql`'s first column is the token, no row or NULL when refused.
    fn grant(&mut self, kind: &str, resource: &str, sql: &str) -> Option<i64> {
        self.run(kind, resource, |t| *t, |tx| Ok(tx.query_opt(sql, &[])?.and_then(|r| r.get::<_, Option<i64>>(0))))
            .flatten()
    }

    fn record(&mut self, op: crate::history::Pending, kind: &str, resource: &str, token: Option<i64>, outcome: Outcome) {
        if outcome == Outcome::Unknown {
            self.client = None;
        }
        self.history.end(op, &self.name, kind, resource, token, self.port, outcome);
    }

    /// The fenced read-modify-write of `resource`'s counter under `token`,
    /// with `then` (a release) in the same transaction. True when it committed.
    pub fn fenced_write(&mut self, kind: &str, resource: &str, token: i64, then: Option<&str>) -> bool {
        let op_id = self.history.begin();
        let id = op_id.id as i64;
        let Some(client) = self.client.as_mut() else { return false };
        let result = client.transaction().and_then(|mut tx| {
            let n: i64 = tx.query_one("SELECT n FROM counters WHERE resource = $1 FOR UPDATE", &[&resource])?.get(0);
            tx.execute("UPDATE counters SET n = $2, token = $3 WHERE resource = $1", &[&resource, &(n + 1), &token])?;
            tx.execute(
                "INSERT INTO applied (op, resource, token, n_before, n_after, slot) VALUES ($1, $2, $3, $4, $5, \
                   (SELECT scheduled_for FROM distlock.task_execution_log \
                     WHERE fencing_token = $3 AND 'task:' || task_id = $2))",
                &[&id, &resource, &token, &n, &(n + 1)],
            )?;
            if let Some(sql) = then {
                tx.batch_execute(sql)?;
            }
            tx.commit()
        });
        let outcome = outcome_of(&result, client.is_closed());
        self.record(op_id, kind, resource, Some(token), outcome);
        result.is_ok()
    }
}

fn pause(ms: u64) {
    thread::sleep(Duration::from_millis(ms)); // the work itself, or a poll interval
}

/// Claims a due task, works, then writes its result and completes it in one
/// transaction; or, when a loss was asked for, gives the claim's lock up
/// first (see `lose`).
fn task_round(w: &mut Worker, lease_mode: bool, losses: &Losses) {
    let fetch = if lease_mode {
        format!("SELECT task_id, fencing_token FROM distlock.worker_fetch_and_execute_task($1, '{HOLD}') WHERE acquired")
    } else {
        "SELECT task_id, fencing_token FROM distlock.worker_fetch_and_execute_task($1) WHERE acquired".to_string()
    };
    let name = w.name.clone();
    let op = w.history.begin();
    let client = w.client.as_mut().expect("connected");
    let result = client.transaction().and_then(|mut tx| {
        let row = tx.query_opt(fetch.as_str(), &[&name])?;
        tx.commit().map(|_| row.map(|r| (r.get::<_, i32>(0), r.get::<_, i64>(1))))
    });
    let outcome = outcome_of(&result, client.is_closed());
    let Ok(Some((task_id, token))) = result else {
        if outcome != Outcome::Ok {
            w.record(op, "claim", "task", None, outcome);
        }
        return pause(20);
    };
    let resource = format!("task:{task_id}");
    w.record(op, "claim", &resource, Some(token), outcome);
    pause(10);
    let release = if lease_mode {
        format!("SELECT distlock.release_task_lease({task_id}, {token}, 'completed')")
    } else {
        format!("SELECT distlock.release_task_lock({task_id}, '{name}', 'completed')")
    };
    let loss = losses.lock().expect("losses").pop();
    match loss {
        Some(loss) => lose(w, loss, lease_mode, &resource, token, &release),
        None => {
            w.fenced_write("write", &resource, token, Some(&release));
        }
    }
}

/// The holder's connection runs DISCARD ALL or pg_advisory_unlock_all()
/// while it holds the claim (recorded as `lose-claim`, or as `discard` for
/// a lease-mode claim, which no session lock stands for), then carries on
/// with its token: a release alone and a fenced write alone, or the write
/// with the release in its transaction. A session claim is lost at once:
/// checker.rs requires that neither is accepted.
fn lose(w: &mut Worker, loss: Loss, lease_mode: bool, resource: &str, token: i64, release: &str) {
    let sql = if loss.unlock_all { "SELECT pg_advisory_unlock_all()" } else { "DISCARD ALL" };
    let op = w.history.begin();
    let Some(client) = w.client.as_mut() else { return };
    // DISCARD ALL cannot run in a transaction block: its own statement.
    let result = client.batch_execute(sql);
    let outcome = outcome_of(&result, client.is_closed());
    let acked = outcome == Outcome::Ok;
    w.record(op, if lease_mode { "discard" } else { "lose-claim" }, resource, Some(token), outcome);
    if !acked {
        return;
    }
    pause(loss.linger_ms);
    if loss.release_first {
        w.run("release", resource, |_| Some(token), |tx| tx.batch_execute(release));
        w.fenced_write("write", resource, token, None);
    } else {
        w.fenced_write("write", resource, token, Some(release));
    }
}

/// Takes the lease, writes up to three times under it, releases it.
fn lease_round(w: &mut Worker, name: &str) {
    let (resource, owner) = (format!("lease:{name}"), w.name.clone());
    let acquire = format!("SELECT distlock.acquire_lease('{name}', '{owner}', '{HOLD}')");
    let Some(token) = w.grant("acquire", &resource, &acquire) else {
        return pause(20);
    };
    for _ in 0..3 {
        pause(10);
        if !w.fenced_write("write", &resource, token, None) {
            break;
        }
    }
    let release = format!("SELECT distlock.release_lease('{name}', '{owner}')");
    w.run("release", &resource, |_| Some(token), |tx| tx.batch_execute(&release));
    pause(10);
}

/// Campaigns; as leader, writes under its term, and resigns now and then so
/// that leadership changes hands.
fn election_round(w: &mut Worker, group: &str, round: u64) {
    let (resource, node) = (format!("election:{group}"), w.name.clone());
    let campaign = format!("SELECT term FROM distlock.try_become_leader('{group}', '{node}', '{HOLD}') WHERE is_leader");
    if let Some(term) = w.grant("campaign", &resource, &campaign) {
        let resign = format!("SELECT distlock.resign_leader('{group}', '{node}')");
        w.fenced_write("write", &resource, term, (round % 4 == 0).then_some(resign.as_str()));
    }
    pause(30);
}

/// Consumes a job and completes it in the transaction that records its
/// result, as docs/queue.md advises for exactly-once effects.
fn queue_round(w: &mut Worker) {
    let consume = format!("SELECT task_id, attempts::int FROM distlock.consume_task('{}', '{HOLD}')", w.name);
    let Some(Some((job, attempt))) = w.run("consume", "job", |_| None, |tx| {
        Ok(tx.query_opt(consume.as_str(), &[])?.map(|r| (r.get::<_, i64>(0), r.get::<_, i32>(1))))
    }) else {
        return pause(20);
    };
    pause(10);
    let (name, op) = (w.name.clone(), w.history.begin());
    let Some(client) = w.client.as_mut() else { return };
    let result = client.transaction().and_then(|mut tx| {
        let completed: bool =
            tx.query_one("SELECT distlock.complete_task($1, $2, $3)", &[&job, &name, &attempt])?.get(0);
        if completed {
            tx.execute("INSERT INTO done VALUES ($1, $2)", &[&job, &(op.id as i64)])?;
        }
        tx.commit().map(|_| completed)
    });
    let outcome = match outcome_of(&result, client.is_closed()) {
        Outcome::Ok if matches!(result, Ok(false)) => Outcome::Refused("lost".to_string()),
        other => other,
    };
    w.record(op, "complete", &format!("job:{job}"), Some(attempt as i64), outcome);
}
