//! A nemesis soak against the test primary: the fleet does fenced
//! read-modify-write under session claims, lease-mode claims, leases and
//! leaderships (tasks are re-armed as soon as they complete, so slots keep
//! coming) while a nemesis, at random, freezes fleet backends with
//! SIGSTOP/SIGCONT, ends them with pg_terminate_backend or kill -9 (the
//! postmaster then restarts every session), crash-restarts the server,
//! replays tokens that newer grants have replaced, and makes a task
//! holder's own connection run DISCARD ALL or pg_advisory_unlock_all()
//! while it holds its claim (a pooler's reset; the holder then still tries
//! to write and release with its token, which must be refused for a
//! session claim). Afterwards the fleet must
//! recover by itself, and the checker must find nothing lost, nothing
//! applied twice and no stale write accepted in the history it wrote.
//!
//! Runs only when DISTLOCK_SOAK_SECONDS is set (scripts/test.sh: 120);
//! DISTLOCK_SOAK_SEED replays a run's choice of faults.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crate::checker::{check, summary, superseded};
use crate::fleet::{prepare, Fleet, Loss, Role, Worker};
use crate::ha::signal;
use crate::history::{history_path, History};
use crate::support::*;

const ROLES: &[Role] = &[
    Role::SessionClaims,
    Role::SessionClaims,
    Role::SessionClaims,
    Role::LeaseClaims,
    Role::LeaseClaims,
    Role::LeaseClaims,
    Role::Lease("ledger"),
    Role::Lease("ledger"),
    Role::Lease("archive"),
    Role::Lease("archive"),
    Role::Election("scheduler"),
    Role::Election("scheduler"),
];

/// One server restart per this much soak.
const RESTART_EVERY: Duration = Duration::from_secs(50);

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().map(|v| v.parse().unwrap_or_else(|_| panic!("{name} is not a number: {v}")))
}

/// xorshift64*: enough to pick faults, and replayable from its seed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Sweeps (recovering claims of ended sessions) and re-arms completed tasks,
/// every 200 ms, reconnecting after crashes.
fn keeper(db: String, stop: Arc<AtomicBool>) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        let url = format!("host=127.0.0.1 port={} user=postgres dbname={db} application_name=keeper", primary_port());
        let mut client: Option<Client> = None;
        while !stop.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(200)); // the sweep's period
            let Some(c) = client.as_mut().filter(|c| !c.is_closed()) else {
                client = Client::connect(&url, NoTls).ok();
                continue;
            };
            let _ = c.batch_execute(
                "SELECT distlock.check_and_recover_timeout_tasks(); \
                 UPDATE distlock.scheduled_tasks SET next_run_at = clock_timestamp() \
                  WHERE next_run_at > now() + interval '1 day'",
            );
        }
    })
}

/// A frozen backend is thawed even if the test fails meanwhile.
struct Frozen(i32);

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").args(["-CONT", &self.0.to_string()]).status();
    }
}

fn fleet_backends(c: &mut Client, db: &str) -> Vec<i32> {
    c.query("SELECT pid FROM pg_stat_activity WHERE datname = $1 AND application_name LIKE 'fleet-%'", &[&db])
        .map(|rows| rows.iter().map(|r| r.get(0)).collect())
        .unwrap_or_default()
}

#[test]
fn fenced_writes_survive_a_nemesis_with_nothing_lost_applied_twice_or_stale() {
    let Some(seconds) = env_number("DISTLOCK_SOAK_SECONDS") else {
        eprintln!("nemesis soak: skipped, DISTLOCK_SOAK_SECONDS is not set (scripts/test.sh sets 120)");
        return;
    };
    let seed = env_number("DISTLOCK_SOAK_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as u64 | 1
    });
    eprintln!("nemesis soak: {seconds} s, DISTLOCK_SOAK_SEED={seed}");
    let mut rng = Rng(seed);
    let db = fresh_db("nemesis_soak");
    prepare(&mut connect(&db), 8, &["ledger", "archive"], &["scheduler"], 0);
    let history = Arc::new(History::create(&history_path("nemesis")));
    let conninfo = format!("host=127.0.0.1 port={} user=postgres dbname={db} connect_timeout=2", primary_port());
    let fleet = Fleet::start(&conninfo, ROLES, &history);
    let stop_keeper = Arc::new(AtomicBool::new(false));
    let keeper = keeper(db.clone(), stop_keeper.clone());
    let mut zombie = Worker::new(&conninfo, "zombie", &history);

    let (start, until) = (Instant::now(), Instant::now() + Duration::from_secs(seconds));
    let mut faults: BTreeMap<&str, usize> = BTreeMap::new();
    let mut restarts = 0;
    while Instant::now() < until {
        thread::sleep(Duration::from_millis(300 + rng.below(1200))); // the time between faults
        if start.elapsed() > RESTART_EVERY * (restarts + 1) {
            restarts += 1;
            drop(crash_restart_primary(&db));
            *faults.entry("server restart").or_default() += 1;
            continue;
        }
        let mut c = connect_when_up(primary_port(), &db, "nemesis");
        let backends = fleet_backends(&mut c, &db);
        let Some(&pid) = backends.get(rng.below(backends.len().max(1) as u64) as usize) else { continue };
        let fault = match rng.below(12) {
            0..=3 => {
                signal(pid, "-STOP");
                let _thaw = Frozen(pid);
                thread::sleep(Duration::from_millis(300 + rng.below(3700))); // how long it stays frozen
                "SIGSTOP"
            }
            4 | 5 => {
                let _ = c.execute("SELECT pg_terminate_backend($1)", &[&pid]);
                "pg_terminate_backend"
            }
            6 => {
                signal(pid, "-KILL");
                "kill -9 of a backend"
            }
            10 | 11 => {
                let loss = Loss { unlock_all: rng.below(2) == 0, release_first: rng.below(2) == 0, linger_ms: rng.below(400) };
                fleet.lose_a_claim(loss);
                "a task holder's DISCARD ALL or pg_advisory_unlock_all()"
            }
            _ => {
                let stale = superseded(&history.read(), |_| true);
                let Some((resource, token)) = stale.get(rng.below(stale.len().max(1) as u64) as usize) else { continue };
                if !zombie.connected() {
                    continue;
                }
                zombie.fenced_write("stale-write", resource, *token, None);
                "stale write"
            }
        };
        *faults.entry(fault).or_default() += 1;
    }

    // The fleet recovers by itself: every kind of hold writes again.
    let healed = history.now();
    eventually("every kind of worker to write again after the faults", Duration::from_secs(60), || {
        let ops = history.read();
        ["task:", "lease:", "election:"]
            .iter()
            .all(|r| ops.iter().any(|o| o.kind == "write" && o.resource.starts_with(r) && o.start > healed && o.acked()))
    });
    fleet.stop();
    stop_keeper.store(true, Ordering::Relaxed);
    keeper.join().expect("keeper");

    let ops = history.read();
    eprintln!("nemesis soak: faults {faults:?}\nhistory {}: {}", history.path(), summary(&ops));
    let violations = check(&mut connect(&db), &ops);
    assert!(violations.is_empty(), "{} violations (seed {seed}), history in {}:\n{}", violations.len(), history.path(), violations.join("\n"));
    let writes = ops.iter().filter(|o| o.kind == "write" && o.acked()).count();
    assert!(writes >= 100, "enough acknowledged writes to mean something ({writes})");
    let lost = ops.iter().filter(|o| o.kind == "lose-claim" && o.acked()).count();
    eprintln!("nemesis soak: {lost} session claims lost to DISCARD ALL or pg_advisory_unlock_all()");
    if seconds >= 60 {
        for fault in ["SIGSTOP", "pg_terminate_backend", "stale write", "server restart"] {
            assert!(faults.contains_key(fault), "the nemesis never tried {fault}: {faults:?}");
        }
        assert!(lost > 0, "no session claim was lost to DISCARD ALL or pg_advisory_unlock_all()");
    }
}
