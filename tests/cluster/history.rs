//! The history of a fleet run, for the checker: every operation with its
//! worker, resource, token, start and end (microseconds since the run
//! began), the server port that answered and its outcome. Each operation is
//! appended to a file when it ends, one tab-separated line, and the checker
//! reads that file back, so a failed run leaves its evidence behind.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Ok,
    /// The server refused it with this SQLSTATE and the transaction rolled back.
    Refused(String),
    /// The connection broke before the answer: it may or may not have committed.
    Unknown,
}

#[derive(Clone, Debug)]
pub struct Op {
    pub id: u64,
    pub worker: String,
    /// claim, acquire, campaign, consume: grants; write, stale-write,
    /// complete: fenced writes; release; lose-claim, discard: a task
    /// holder's DISCARD ALL or pg_advisory_unlock_all(); nemesis.
    pub kind: String,
    /// task:<id>, lease:<name>, election:<group>, job:<id>
    pub resource: String,
    pub token: Option<i64>,
    pub start: u64,
    pub end: u64,
    pub port: u16,
    pub outcome: Outcome,
}

impl Op {
    pub fn acked(&self) -> bool {
        self.outcome == Outcome::Ok
    }
}

/// Where a run's history goes: $DISTLOCK_TEST_DIR (scripts/test.sh's work
/// directory) or the temporary directory.
pub fn history_path(name: &str) -> String {
    let dir = std::env::var("DISTLOCK_TEST_DIR").unwrap_or_else(|_| std::env::temp_dir().display().to_string());
    format!("{dir}/{name}-history.tsv")
}

pub struct History {
    t0: Instant,
    next_id: AtomicU64,
    path: String,
    file: Mutex<File>,
}

/// An operation under way: its id and start are taken before it is sent.
pub struct Pending {
    pub id: u64,
    start: u64,
}

impl History {
    pub fn create(path: &str) -> History {
        let file = File::create(path).unwrap_or_else(|e| panic!("history file {path}: {e}"));
        History { t0: Instant::now(), next_id: AtomicU64::new(1), path: path.to_string(), file: Mutex::new(file) }
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    pub fn now(&self) -> u64 {
        self.t0.elapsed().as_micros() as u64
    }

    pub fn begin(&self) -> Pending {
        Pending { id: self.next_id.fetch_add(1, Ordering::Relaxed), start: self.now() }
    }

    pub fn end(&self, op: Pending, worker: &str, kind: &str, resource: &str, token: Option<i64>, port: u16, outcome: Outcome) {
        let outcome = match outcome {
            Outcome::Ok => "ok".to_string(),
            Outcome::Refused(code) => format!("refused:{code}"),
            Outcome::Unknown => "unknown".to_string(),
        };
        let token = token.map_or("-".to_string(), |t| t.to_string());
        let line = format!("{}\t{worker}\t{kind}\t{resource}\t{token}\t{}\t{}\t{port}\t{outcome}\n", op.id, op.start, self.now());
        self.file.lock().expect("history file").write_all(line.as_bytes()).expect("history write");
    }

    /// Every operation recorded so far. Writers take the file's lock for each
    /// line, so holding it here means no line is read half written.
    pub fn read(&self) -> Vec<Op> {
        let _no_writer = self.file.lock().expect("history file");
        let file = File::open(&self.path).expect("history file");
        BufReader::new(file).lines().map(|l| parse(&l.expect("history line"))).collect()
    }
}

fn parse(line: &str) -> Op {
    let f: Vec<&str> = line.split('\t').collect();
    assert_eq!(f.len(), 9, "history line: {line}");
    let number = |s: &str| s.parse::<u64>().unwrap_or_else(|_| panic!("history line: {line}"));
    Op {
        id: number(f[0]),
        worker: f[1].to_string(),
        kind: f[2].to_string(),
        resource: f[3].to_string(),
        token: (f[4] != "-").then(|| f[4].parse().expect("token")),
        start: number(f[5]),
        end: number(f[6]),
        port: f[7].parse().expect("port"),
        outcome: match f[8] {
            "ok" => Outcome::Ok,
            "unknown" => Outcome::Unknown,
            refused => Outcome::Refused(refused.trim_start_matches("refused:").to_string()),
        },
    }
}

/// What a failed statement tells about its transaction: refused (rolled
/// back) only when the server answered with an ERROR and the session goes
/// on; a FATAL or a broken connection leaves the outcome unknown (a COMMIT
/// may have been written just before a crash ended the session).
pub fn outcome_of<T>(result: &Result<T, postgres::Error>, connection_closed: bool) -> Outcome {
    match result {
        Ok(_) => Outcome::Ok,
        Err(_) if connection_closed => Outcome::Unknown,
        Err(e) => match e.as_db_error() {
            Some(db) if db.severity() == "ERROR" => Outcome::Refused(db.code().code().to_string()),
            _ => Outcome::Unknown,
        },
    }
}
