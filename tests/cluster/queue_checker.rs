//! The queue nemesis' history and its checker (a submodule of
//! queue_nemesis.rs). Every process of the run (producers, consumers, the
//! nemesis, the keeper) appends one tab-separated line per operation to one
//! file, opened with O_APPEND and written with one write() per line, so the
//! lines of concurrent processes never interleave. Times are microseconds
//! since the Unix epoch, client side; the server's timestamps (run_after,
//! lease_expires_at, the claim log's clock_timestamp()) are read in the same
//! unit, from the same kernel clock (client and server share the machine).
//!
//! Besides the history the checker reads two things the server kept: a
//! claim log (one row per committed claim, written by a row trigger on
//! distlock.task_queue in the claim's own transaction, so a claim rolled
//! back leaves no row and a claim by a client that died is still seen) and
//! distlock.jobs at the end. See check() for what is checked.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};

use crate::history::Outcome;

pub const MS: i64 = 1_000;
pub const SECOND: i64 = 1_000_000;

pub fn now_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_micros() as i64
}

/// A job an operation names: for an enqueue (id, max_attempts, run_after),
/// for a claim (id, attempt, lease_expires_at).
#[derive(Clone, Copy, Debug)]
pub struct JobRef {
    pub id: i64,
    pub attempt: i32,
    pub at: i64,
}

/// A settle an operation sent: 'c' completed, 'f' failed (retry due at
/// `run_after`, -1 when dead or not read), 'r' refused by the server.
#[derive(Clone, Copy, Debug)]
pub struct Settle {
    pub id: i64,
    pub attempt: i32,
    pub result: char,
    pub run_after: i64,
}

#[derive(Clone, Debug)]
pub struct Op {
    /// The worker id (consumers), producer-N, nemesis or keeper; for a
    /// nemesis fault, the worker (or consumer incarnation) it hit.
    pub actor: String,
    /// enqueue, enqueue-prepared, consume, claim-rolled-back,
    /// claim-prepared, commit-prepared, rollback-prepared, complete, fail,
    /// sigkill, terminate, sigstop, ddl, pause, resume.
    pub kind: String,
    /// The queues it names, comma-separated; * for every queue.
    pub queues: String,
    pub start: i64,
    pub end: i64,
    pub outcome: Outcome,
    /// p_wait of a claim in ms, 0 without.
    pub wait_ms: i64,
    pub jobs: Vec<JobRef>,
    pub settles: Vec<Settle>,
    /// A prepared transaction's gid, a DDL statement, a pid.
    pub note: String,
}

impl Op {
    pub fn new(actor: &str, kind: &str, queues: &str, start: i64) -> Op {
        Op {
            actor: actor.to_string(),
            kind: kind.to_string(),
            queues: queues.to_string(),
            start,
            end: start,
            outcome: Outcome::Ok,
            wait_ms: 0,
            jobs: Vec::new(),
            settles: Vec::new(),
            note: String::new(),
        }
    }

    pub fn acked(&self) -> bool {
        self.outcome == Outcome::Ok
    }

    fn names_queue(&self, queue: &str) -> bool {
        self.queues == "*" || self.queues.split(',').any(|q| q == queue)
    }

    fn line(&self) -> String {
        let outcome = match &self.outcome {
            Outcome::Ok => "ok".to_string(),
            Outcome::Refused(code) => format!("refused:{code}"),
            Outcome::Unknown => "unknown".to_string(),
        };
        let jobs = list(self.jobs.iter().map(|j| format!("{}/{}/{}", j.id, j.attempt, j.at)));
        let settles = list(self.settles.iter().map(|s| format!("{}/{}/{}/{}", s.id, s.attempt, s.result, s.run_after)));
        let note = self.note.replace(['\t', '\n'], " ");
        format!(
            "{}\t{}\t{}\t{}\t{}\t{outcome}\t{}\t{jobs}\t{settles}\t{note}\n",
            self.actor, self.kind, self.queues, self.start, self.end, self.wait_ms
        )
    }
}

fn list(items: impl Iterator<Item = String>) -> String {
    let joined = items.collect::<Vec<_>>().join(",");
    if joined.is_empty() { "-".to_string() } else { joined }
}

/// Appends whole lines to the shared history file.
pub struct Recorder(File);

impl Recorder {
    pub fn open(path: &str) -> Recorder {
        Recorder(OpenOptions::new().create(true).append(true).open(path).unwrap_or_else(|e| panic!("history {path}: {e}")))
    }

    /// One write() of the whole line: O_APPEND places it at the end as one piece.
    pub fn record(&mut self, mut op: Op) {
        if op.end < op.start {
            op.end = now_us();
        }
        self.0.write_all(op.line().as_bytes()).expect("history write");
    }
}

pub fn read_history(path: &str) -> Vec<Op> {
    let file = File::open(path).unwrap_or_else(|e| panic!("history {path}: {e}"));
    BufReader::new(file).lines().map(|l| parse(&l.expect("history line"))).collect()
}

fn parse(line: &str) -> Op {
    let f: Vec<&str> = line.split('\t').collect();
    assert_eq!(f.len(), 10, "history line: {line}");
    let number = |s: &str| s.parse::<i64>().unwrap_or_else(|_| panic!("history line: {line}"));
    let parts = |s: &str| -> Vec<Vec<String>> {
        if s == "-" { Vec::new() } else { s.split(',').map(|i| i.split('/').map(str::to_string).collect()).collect() }
    };
    Op {
        actor: f[0].to_string(),
        kind: f[1].to_string(),
        queues: f[2].to_string(),
        start: number(f[3]),
        end: number(f[4]),
        outcome: match f[5] {
            "ok" => Outcome::Ok,
            "unknown" => Outcome::Unknown,
            refused => Outcome::Refused(refused.trim_start_matches("refused:").to_string()),
        },
        wait_ms: number(f[6]),
        jobs: parts(f[7]).iter().map(|p| JobRef { id: number(&p[0]), attempt: number(&p[1]) as i32, at: number(&p[2]) }).collect(),
        settles: parts(f[8])
            .iter()
            .map(|p| Settle {
                id: number(&p[0]),
                attempt: number(&p[1]) as i32,
                result: p[2].chars().next().expect("result"),
                run_after: number(&p[3]),
            })
            .collect(),
        note: f[9].to_string(),
    }
}

/// A committed claim, from the claim log.
#[derive(Clone, Debug)]
pub struct Claim {
    pub id: i64,
    pub attempt: i32,
    pub worker: String,
    pub queue: String,
    pub at: i64,
    pub lease: i64,
}

/// A job as distlock.jobs shows it at the end.
#[derive(Clone, Debug)]
pub struct FinalJob {
    pub status: String,
    pub attempts: i32,
    pub lease: Option<i64>,
}

/// What the run was: its queues' limits, the end of its faults (liveness is
/// judged up to there) and when the final state was read.
pub struct Run {
    pub limits: BTreeMap<String, i64>,
    pub stopped: i64,
    pub read_at: i64,
}

/// How long a runnable job may wait while a consumer of its queue waits
/// idle: the second docs/queue.md promises (with shared memory, as the soak
/// runs). No slack is added for a loaded machine; instead every time the
/// rule reads errs towards "not yet runnable" and "not idle" (see IDLE_FROM,
/// BEFORE_CLAIM and the excuses' EXCUSE_SLACK), so that the second is what
/// the server itself had.
pub const GRACE: i64 = SECOND;

/// A waiting call counts as idle from this long after its client sent it:
/// the server may not have begun it before (a new call's first look takes
/// any runnable job anyway).
const IDLE_FROM: i64 = 500 * MS;

/// A call that returned a job stopped being idle at the look that claimed
/// it, which began before the claim log's row (the trigger runs after the
/// look found and locked the job): a look of a loaded 2-core machine takes
/// up to a few hundred milliseconds, and meanwhile a job that turned
/// runnable after its snapshot waits for another consumer.
const BEFORE_CLAIM: i64 = 250 * MS;

/// How long after a SIGSTOP, DDL, the resolution of a prepared transaction
/// or a limited queue's possibly-full time the system is still excused:
/// the resolving statement's commit is seen by the client after the
/// server's, and sleepers that look each second (prepared transactions, a
/// full limited queue's backoff) look again a look's duration after that.
const EXCUSE_SLACK: i64 = 200 * MS;

/// Every violation found, each a sentence naming the operations involved:
///
/// - settled twice: two acknowledged settles (complete or fail) of one
///   attempt; a settle acknowledged for a worker that did not hold that
///   attempt, or begun after the job's next attempt had been claimed;
/// - lost: an enqueued job (acknowledged, or committed prepared) missing
///   from distlock.jobs, a completed one not completed, one in a state that
///   is not completed, dead or still runnable (pending, failed, or
///   processing with its lease run out), a rolled-back prepared enqueue's
///   job present, or more unknown jobs than unknown enqueues;
/// - limit exceeded: more jobs of a limited queue surely held at once
///   (from the end of the claim call that returned each to the start of its
///   settle, its lease's end or its next claim) than its limit;
/// - claimed for a dead client: a claim committed more than 1 s after its
///   consumer's client was SIGKILLed or its backend terminated, with no
///   SIGSTOP or DDL in between that could have held that backend back;
/// - not handed out: a job surely runnable (its enqueue returned and its
///   run_after passed; its lease ran out; its failed attempt's retry came;
///   its claim was rolled back) for GRACE while a consumer of its queue sat
///   idle in a p_wait call (from IDLE_FROM after the call began to its end
///   or its p_wait, whichever came first, or to BEFORE_CLAIM before the
///   claim of the first job it returned; a settle-and-consume that settled
///   something is not idle), with no excuse in that grace: a SIGSTOP of any
///   backend or DDL (the whole database), a pause of the queue, a prepared
///   claim of the queue not yet resolved, or its limited queue possibly
///   full (counting each committed claim, from the claim log, from its
///   claim until its settle returned or its lease ended).
pub fn check(ops: &[Op], claims: &[Claim], jobs: &HashMap<i64, FinalJob>, run: &Run) -> Vec<String> {
    let mut violations = Vec::new();
    settled_once_per_attempt(ops, claims, &mut violations);
    none_lost(ops, jobs, run, &mut violations);
    limits_held(ops, claims, run, &mut violations);
    nothing_claimed_for_dead_clients(ops, claims, &mut violations);
    runnable_jobs_handed_out(ops, claims, run, &mut violations);
    violations
}

fn show(op: &Op) -> String {
    op.line().trim_end().replace('\t', " | ")
}

fn claims_by_attempt(claims: &[Claim]) -> HashMap<(i64, i32), &Claim> {
    claims.iter().map(|c| ((c.id, c.attempt), c)).collect()
}

fn acked_settles(ops: &[Op]) -> impl Iterator<Item = (&Op, &Settle)> {
    ops.iter().filter(|o| o.acked()).flat_map(|o| o.settles.iter().filter(|s| s.result != 'r').map(move |s| (o, s)))
}

fn settled_once_per_attempt(ops: &[Op], claims: &[Claim], v: &mut Vec<String>) {
    let by_attempt = claims_by_attempt(claims);
    let mut seen: HashMap<(i64, i32), &Op> = HashMap::new();
    for (op, s) in acked_settles(ops) {
        if let Some(first) = seen.insert((s.id, s.attempt), op) {
            v.push(format!("settled twice: job {} attempt {} by\n  {}\n  {}", s.id, s.attempt, show(first), show(op)));
        }
        match by_attempt.get(&(s.id, s.attempt)) {
            Some(c) if c.worker != op.actor => {
                v.push(format!("settled by a non-holder: job {} attempt {} claimed by {}, settled by {}", s.id, s.attempt, c.worker, show(op)))
            }
            None => v.push(format!("settled an attempt never claimed: job {} attempt {} by {}", s.id, s.attempt, show(op))),
            _ => {}
        }
        if let Some(next) = by_attempt.get(&(s.id, s.attempt + 1)).filter(|n| n.at < op.start) {
            v.push(format!("settled after a takeover: job {} attempt {} claimed again by {} at {}, then {}", s.id, s.attempt, next.worker, next.at, show(op)));
        }
    }
}

/// Jobs whose enqueue is known to have committed (id -> (queue, max attempts,
/// surely runnable from)), jobs known not to exist, and how many enqueues
/// may have committed a job whose id nobody saw.
struct Enqueued {
    known: BTreeMap<i64, (String, i32, i64)>,
    rolled_back: HashSet<i64>,
    unknown: usize,
}

fn enqueued(ops: &[Op]) -> Enqueued {
    let mut e = Enqueued { known: BTreeMap::new(), rolled_back: HashSet::new(), unknown: 0 };
    let resolutions: HashMap<&str, Vec<&Op>> = ops
        .iter()
        .filter(|o| o.kind.ends_with("-prepared") && o.kind != "claim-prepared" && o.kind != "enqueue-prepared")
        .fold(HashMap::new(), |mut m, o| {
            m.entry(o.note.as_str()).or_default().push(o);
            m
        });
    for op in ops.iter().filter(|o| o.kind == "enqueue") {
        match (&op.outcome, op.jobs.first()) {
            (Outcome::Ok, Some(j)) => {
                let entry = e.known.entry(j.id).or_insert((op.queues.clone(), j.attempt, op.end.max(j.at)));
                entry.2 = entry.2.min(op.end.max(j.at));
            }
            (Outcome::Unknown, _) => e.unknown += 1,
            _ => {}
        }
    }
    for op in ops.iter().filter(|o| o.kind == "enqueue-prepared") {
        let (Outcome::Ok, Some(j)) = (&op.outcome, op.jobs.first()) else {
            e.unknown += usize::from(op.outcome == Outcome::Unknown);
            continue;
        };
        let resolved = resolutions.get(op.note.as_str()).into_iter().flatten().filter(|r| r.acked()).min_by_key(|r| r.end);
        match resolved {
            Some(r) if r.kind == "commit-prepared" => {
                e.known.insert(j.id, (op.queues.clone(), j.attempt, r.end.max(j.at)));
            }
            Some(_) => {
                e.rolled_back.insert(j.id);
            }
            None => e.unknown += 1,
        }
    }
    e
}

fn none_lost(ops: &[Op], jobs: &HashMap<i64, FinalJob>, run: &Run, v: &mut Vec<String>) {
    let e = enqueued(ops);
    let completed: HashSet<i64> = acked_settles(ops).filter(|(_, s)| s.result == 'c').map(|(_, s)| s.id).collect();
    for (id, (queue, _, _)) in &e.known {
        let Some(job) = jobs.get(id) else {
            v.push(format!("lost: job {id} of queue {queue} was enqueued and is not in distlock.jobs"));
            continue;
        };
        let runnable = match job.status.as_str() {
            "completed" | "dead" | "pending" | "failed" => true,
            "processing" => job.lease.is_some_and(|l| l <= run.read_at),
            _ => false,
        };
        if !runnable {
            v.push(format!("lost: job {id} ended {} (attempt {}, lease {:?}) after every consumer stopped", job.status, job.attempts, job.lease));
        }
        if completed.contains(id) && job.status != "completed" {
            v.push(format!("lost: job {id} was completed (acknowledged) but ended {}", job.status));
        }
    }
    for id in &e.rolled_back {
        if jobs.contains_key(id) {
            v.push(format!("rolled-back prepared enqueue's job {id} exists"));
        }
    }
    let strangers = jobs.keys().filter(|id| !e.known.contains_key(id)).count();
    if strangers > e.unknown {
        v.push(format!("{strangers} jobs in distlock.jobs that no acknowledged enqueue returned, but only {} enqueues had an unknown outcome", e.unknown));
    }
}

/// The end of attempt `c`'s hold, as far as the history shows: its first
/// acknowledged settle's end (or start, `surely`), else its lease's end;
/// never after the job's next claim.
fn hold_end(c: &Claim, settles: &HashMap<(i64, i32), Vec<&Op>>, next: Option<&&Claim>, surely: bool) -> i64 {
    let settled = settles
        .get(&(c.id, c.attempt))
        .into_iter()
        .flatten()
        .filter(|o| if surely { true } else { o.acked() })
        .map(|o| if surely { o.start } else { o.end })
        .min();
    let mut end = c.lease;
    if let Some(s) = settled {
        end = end.min(s);
    }
    if let Some(n) = next {
        end = end.min(n.at);
    }
    end
}

/// The settles sent of each attempt, by operations that may have committed
/// (acknowledged or unknown; the server's refusals left out).
fn settle_ops(ops: &[Op]) -> HashMap<(i64, i32), Vec<&Op>> {
    let mut m: HashMap<(i64, i32), Vec<&Op>> = HashMap::new();
    for op in ops.iter().filter(|o| !matches!(o.outcome, Outcome::Refused(_))) {
        for s in op.settles.iter().filter(|s| s.result != 'r') {
            m.entry((s.id, s.attempt)).or_default().push(op);
        }
    }
    m
}

fn limits_held(ops: &[Op], claims: &[Claim], run: &Run, v: &mut Vec<String>) {
    let by_attempt = claims_by_attempt(claims);
    let settles = settle_ops(ops);
    for (queue, &limit) in &run.limits {
        // Surely held: from the end of the call that returned the job (for a
        // prepared claim, of its COMMIT PREPARED) to the start of its settle.
        let mut edges: Vec<(i64, i32, String)> = Vec::new();
        let commits: HashMap<&str, &Op> =
            ops.iter().filter(|o| o.kind == "commit-prepared" && o.acked()).map(|o| (o.note.as_str(), o)).collect();
        for op in ops.iter().filter(|o| o.acked() && matches!(o.kind.as_str(), "consume" | "claim-prepared")) {
            let from = if op.kind == "claim-prepared" {
                match commits.get(op.note.as_str()) {
                    Some(c) => c.end,
                    None => continue,
                }
            } else {
                op.end
            };
            for j in &op.jobs {
                let Some(c) = by_attempt.get(&(j.id, j.attempt)).filter(|c| &c.queue == queue) else { continue };
                let to = hold_end(c, &settles, by_attempt.get(&(j.id, j.attempt + 1)), true);
                if to > from {
                    edges.push((from, 1, format!("job {} attempt {} by {}", j.id, j.attempt, c.worker)));
                    edges.push((to, -1, String::new()));
                }
            }
        }
        edges.sort_by_key(|e| (e.0, e.1)); // ends before starts at the same instant
        let (mut held, mut reported) = (0i64, 0);
        let mut holders: Vec<String> = Vec::new();
        for (at, delta, who) in edges {
            held += delta as i64;
            if delta > 0 {
                holders.push(who);
            }
            if held > limit && reported < 5 {
                reported += 1;
                v.push(format!("limit exceeded: {held} jobs of queue {queue} (limit {limit}) held at {at}; recent holders {:?}", &holders[holders.len().saturating_sub(held as usize)..]));
            }
        }
    }
}

/// Windows in which a job may rightly wait: (start, end, queue or * for all).
fn excuses(ops: &[Op], claims: &[Claim], run: &Run) -> Vec<(i64, i64, String)> {
    let mut w = Vec::new();
    let slack = EXCUSE_SLACK;
    for op in ops {
        match op.kind.as_str() {
            "sigstop" | "ddl" => w.push((op.start, op.end + slack, "*".to_string())),
            "pause" => {
                let resumed = ops.iter().filter(|r| r.kind == "resume" && r.queues == op.queues && r.start >= op.start).map(|r| r.end).min();
                w.push((op.start, resumed.unwrap_or(i64::MAX), op.queues.clone()));
            }
            "claim-prepared" | "enqueue-prepared" if op.kind == "claim-prepared" || op.outcome != Outcome::Ok => {
                let resolved = ops.iter().filter(|r| r.note == op.note && r.kind.ends_with("ed") && r.acked()).map(|r| r.end).min();
                w.push((op.start, resolved.unwrap_or(i64::MAX).saturating_add(slack), op.queues.clone()));
            }
            // The keeper's resolution of a prepared transaction whose client
            // died: its start is when it was prepared; it may hold any queue.
            "rollback-prepared" | "commit-prepared" if op.actor == "keeper" => w.push((op.start, op.end + slack, "*".to_string())),
            _ => {}
        }
    }
    // Limited queues while possibly full: every committed claim counted from
    // its claim to the end of its settle or lease.
    let by_attempt = claims_by_attempt(claims);
    let settles = settle_ops(ops);
    for (queue, &limit) in &run.limits {
        let mut edges: Vec<(i64, i64)> = Vec::new();
        for c in claims.iter().filter(|c| &c.queue == queue) {
            let end = hold_end(c, &settles, by_attempt.get(&(c.id, c.attempt + 1)), false);
            edges.push((c.at - 50 * MS, 1));
            edges.push((end + slack, -1));
        }
        edges.sort_by_key(|e| (e.0, -e.1)); // starts before ends: possibly full errs long
        let (mut held, mut full_since) = (0i64, None);
        for (at, delta) in edges {
            held += delta;
            match full_since {
                None if held >= limit => full_since = Some(at),
                Some(since) if held < limit => {
                    w.push((since, at, queue.clone()));
                    full_since = None;
                }
                _ => {}
            }
        }
    }
    w.sort();
    w
}

fn nothing_claimed_for_dead_clients(ops: &[Op], claims: &[Claim], v: &mut Vec<String>) {
    let deaths: Vec<(&str, &Op)> = ops
        .iter()
        .filter(|o| matches!(o.kind.as_str(), "sigkill" | "terminate") && o.acked())
        .map(|o| (o.actor.as_str(), o))
        .collect();
    let held_back: Vec<&Op> = ops.iter().filter(|o| matches!(o.kind.as_str(), "sigstop" | "ddl")).collect();
    for c in claims {
        // A SIGKILL names a consumer incarnation (all its connections), a
        // termination one connection's worker id.
        let died = deaths
            .iter()
            .filter(|(who, _)| c.worker == *who || c.worker.starts_with(&format!("{who}.")))
            .map(|(_, op)| *op)
            .min_by_key(|op| op.end);
        let Some(death) = died else { continue };
        if c.at > death.end + SECOND && !held_back.iter().any(|h| h.start < c.at && h.end + 200 * MS > death.start) {
            v.push(format!(
                "claimed for a dead client: job {} attempt {} claimed by {} at {} ({} ms after {})",
                c.id, c.attempt, c.worker, c.at, (c.at - death.end) / MS, show(death)
            ));
        }
    }
}

fn runnable_jobs_handed_out(ops: &[Op], claims: &[Claim], run: &Run, v: &mut Vec<String>) {
    let e = enqueued(ops);
    let windows = excuses(ops, claims, run);
    let settles = settle_ops(ops);
    let mut claims_of: HashMap<i64, Vec<&Claim>> = HashMap::new();
    for c in claims {
        claims_of.entry(c.id).or_default().push(c);
    }
    // When each job was surely runnable: (job, from).
    let mut runnable: Vec<(i64, i64)> = e.known.iter().map(|(id, (_, _, from))| (*id, *from)).collect();
    for c in claims {
        let Some((_, max_attempts, _)) = e.known.get(&c.id) else { continue };
        let settled_before_expiry = settles.get(&(c.id, c.attempt)).into_iter().flatten().any(|o| o.start < c.lease + 100 * MS);
        if c.attempt < *max_attempts && !settled_before_expiry {
            runnable.push((c.id, c.lease));
        }
    }
    for op in ops.iter().filter(|o| o.acked()) {
        for s in op.settles.iter().filter(|s| s.result == 'f' && s.run_after > 0) {
            runnable.push((s.id, op.end.max(s.run_after)));
        }
        let given_back = match op.kind.as_str() {
            "claim-rolled-back" => op.jobs.clone(),
            "rollback-prepared" => ops.iter().filter(|p| p.kind == "claim-prepared" && p.note == op.note).flat_map(|p| p.jobs.clone()).collect(),
            _ => Vec::new(),
        };
        runnable.extend(given_back.iter().map(|j| (j.id, op.end)));
    }
    // Waiting calls and until when each surely sat idle: to its end (or its
    // p_wait's, which the server's deadline is not before) when it returned
    // nothing, else to before the look that claimed its first job.
    let by_attempt = claims_by_attempt(claims);
    let idle: Vec<(&Op, i64)> = ops
        .iter()
        .filter(|o| o.kind == "consume" && o.acked() && o.wait_ms > 0 && o.settles.is_empty())
        .map(|o| {
            let claimed = o.jobs.iter().map(|j| by_attempt.get(&(j.id, j.attempt)).map_or(o.end, |c| c.at)).min();
            (o, claimed.map_or(o.end.min(o.start + o.wait_ms * MS), |at| at - BEFORE_CLAIM))
        })
        .collect();
    let (mut reported, mut watched, points) = (0, 0, runnable.len());
    let mut watched_by_queue: BTreeMap<&str, usize> = BTreeMap::new();
    // Up to 20 shown per queue: a limited queue's many must not hide another's.
    let mut shown: BTreeMap<&str, usize> = BTreeMap::new();
    for (id, from) in runnable {
        let Some((queue, _, _)) = e.known.get(&id) else { continue };
        let grace = GRACE;
        // Taken: its next committed claim, or a settle of a lease that had run out.
        let taken = claims_of.get(&id).into_iter().flatten().map(|c| c.at).filter(|&at| at >= from - 200 * MS).min();
        let settled = settles
            .iter()
            .filter(|((j, _), _)| *j == id)
            .flat_map(|(_, ops)| ops.iter().map(|o| o.start))
            .filter(|&s| s >= from)
            .min();
        let until = [taken, settled, Some(run.stopped)].into_iter().flatten().min().expect("stopped");
        let relevant: Vec<&(i64, i64, String)> = windows.iter().filter(|w| w.2 == "*" || &w.2 == queue).collect();
        // Coverage: the job stayed runnable past its grace while some consumer of its queue waited.
        if until > from + grace && idle.iter().any(|(w, idle_end)| w.names_queue(queue) && w.start < until && *idle_end > from + grace) {
            watched += 1;
            *watched_by_queue.entry(queue.as_str()).or_default() += 1;
        }
        for (waiter, idle_end) in idle.iter().filter(|(w, idle_end)| w.names_queue(queue) && *idle_end > from + grace) {
            // The first moment this waiter sat idle while the job had been
            // runnable for `grace` with nothing to excuse it.
            let mut at = (from + grace).max(waiter.start + IDLE_FROM);
            while let Some(w) = relevant.iter().find(|w| w.0 < at && w.1 > at - grace) {
                at = w.1.saturating_add(grace);
                // An excuse that lasts to the end of the run (a prepared
                // claim whose PREPARE a kill left unknown and nobody
                // resolved ends at i64::MAX) excuses the rest: without this
                // the same window was found again for ever (a CI run hung
                // here for 15 minutes).
                if at >= until {
                    break;
                }
            }
            if at <= *idle_end && at < until {
                reported += 1;
                let n = shown.entry(queue.as_str()).or_default();
                *n += 1;
                if *n <= 20 {
                    v.push(format!(
                        "not handed out: job {id} of queue {queue} runnable from {from}, still not taken {} ms later (taken at {until}) while this consumer waited idle:\n  {}",
                        (at - from) / MS,
                        show(waiter)
                    ));
                }
                break;
            }
        }
    }
    eprintln!(
        "liveness: {points} times a job became runnable, {watched} of them still runnable after the grace while a consumer of its queue waited {watched_by_queue:?}, {reported} not handed out"
    );
    let hidden = reported - shown.values().map(|n| (*n).min(20)).sum::<usize>();
    if hidden > 0 {
        v.push(format!("... {hidden} more jobs not handed out ({shown:?} by queue)"));
    }
}

/// Operations per kind and outcome, for the test's output.
pub fn summary(ops: &[Op]) -> String {
    crate::checker::summary_of(ops.iter().map(|op| (op.kind.as_str(), &op.outcome)))
}
