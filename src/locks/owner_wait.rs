//! Waiting for a lock while watching for deadlocks across a client's
//! connections (issue 47, item 2).
//!
//! The server's own detector sees backends: a client that holds lock A on
//! one connection and waits for B on another, while a second client holds B
//! and waits for A, is no cycle to it, and both wait for ever. Here a
//! waiting backend publishes its wait (owners.rs) and, from deadlock_timeout
//! on, a timeout of its own checks the shared owner table every
//! deadlock_timeout (at least 0.1 s, at most 1 s) in the timeout handler:
//! does its wait close a cycle of owners in which it began waiting last?
//! Only that waiter, the cycle's one victim, finds it. The handler only
//! suspects (it reads entries that may be changing, and may be stale after a
//! pooler's DISCARD ALL): it cancels the wait, and the backend, out of the
//! lock queue, verifies the cycle against the lock manager's own data.
//! Proven, it raises 40P01; otherwise it takes its wait up again (behind
//! whoever queued meanwhile), checked again only after a longer pause each
//! time (BACKOFF_FACTOR). A cycle of backends only (each owner's
//! holding and waiting connection the same) is left to the server's
//! detector, so that no cycle gets two victims.

use std::sync::atomic::{AtomicBool, Ordering};

use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::PgTryBuilder;
use pgrx::PgSqlErrorCode;

use super::owner_graph::{cycle_closed_by, View, Wait};
use super::owners::{self, node_of};
use crate::shared::lock_owners::{self as table, OwnerTable, ORDER};

unsafe extern "C" {
    fn RegisterTimeout(id: i32, handler: Option<unsafe extern "C" fn()>) -> i32;
    fn enable_timeout_every(id: i32, fin_time: pg_sys::TimestampTz, delay_ms: i32);
    fn disable_timeout(id: i32, keep_indicator: bool);
}

/// Any id at or above USER_TIMEOUT (12 to 14 across the supported
/// versions) asks RegisterTimeout for a free user-defined one.
const ANY_USER_TIMEOUT: i32 = 64;
static mut TIMEOUT_ID: i32 = -1;
/// Set while this backend waits under watch: the handler acts only then.
static WATCHING: AtomicBool = AtomicBool::new(false);
/// Set by the handler when it cancelled the wait on a suspicion.
static SUSPECTED: AtomicBool = AtomicBool::new(false);
/// After a suspicion the proof did not bear out, the next check of the
/// same wait comes this many times later (each time again), up to
/// MAX_BACKOFF_MS: a stale entry costs the waiter its place rarely.
const BACKOFF_FACTOR: i32 = 4;
const MAX_BACKOFF_MS: i32 = 30_000;

/// The shared table as the handler reads it.
struct SharedView<'t>(&'t OwnerTable);

impl View for SharedView<'_> {
    fn len(&self) -> usize {
        self.0.capacity
    }
    fn node(&self, conn: usize) -> u64 {
        let entry = &self.0.entries()[conn];
        node_of(entry.owner_hash.load(ORDER), entry.pid.load(ORDER))
    }
    fn waiting(&self, conn: usize) -> Option<Wait> {
        let entry = &self.0.entries()[conn];
        let mode = entry.wait_mode.load(ORDER);
        let seq = entry.wait_seq.load(ORDER);
        (entry.pid.load(ORDER) != 0 && mode != 0).then(|| Wait {
            database: entry.database.load(ORDER),
            key: entry.wait_key.load(ORDER),
            exclusive: mode == 2,
            seq,
            order: seq as i64,
        })
    }
    fn blocks(&self, conn: usize, wait: &Wait) -> bool {
        let entry = &self.0.entries()[conn];
        entry.pid.load(ORDER) != 0
            && entry.database.load(ORDER) == wait.database
            && (entry.blocks(wait.key, wait.exclusive)
                || self.waiting(conn).is_some_and(|theirs| wait.queued_behind(&theirs)))
    }
}

/// The timeout handler (signal context: reads shared memory, allocates
/// nothing, takes no lock, cannot fail).
unsafe extern "C" fn on_watch_timer() {
    if !WATCHING.load(Ordering::SeqCst) || SUSPECTED.load(Ordering::SeqCst) {
        return;
    }
    let Some(table) = table::attached_table() else {
        return;
    };
    let Some(me) = table::my_index(table) else {
        return;
    };
    if cycle_closed_by(&SharedView(table), me).is_some_and(|cycle| !cycle.of_backends_only()) {
        SUSPECTED.store(true, Ordering::SeqCst);
        unsafe {
            pg_sys::InterruptPending = 1;
            pg_sys::QueryCancelPending = 1;
            pg_sys::SetLatch(pg_sys::MyLatch);
        }
    }
}

/// Starts the watch: a first check after deadlock_timeout (times
/// `backoff`, at most MAX_BACKOFF_MS past it), then every deadlock_timeout
/// (0.1 to 1 s).
fn arm(backoff: i32) {
    unsafe {
        if TIMEOUT_ID < 0 {
            TIMEOUT_ID = RegisterTimeout(ANY_USER_TIMEOUT, Some(on_watch_timer));
        }
        let deadlock_ms = pg_sys::DeadlockTimeout.max(1);
        let first_ms = deadlock_ms.saturating_mul(backoff).min(deadlock_ms.saturating_add(MAX_BACKOFF_MS));
        let every_ms = pg_sys::DeadlockTimeout.clamp(100, 1000);
        SUSPECTED.store(false, Ordering::SeqCst);
        WATCHING.store(true, Ordering::SeqCst);
        enable_timeout_every(
            TIMEOUT_ID,
            pg_sys::GetCurrentTimestamp() + first_ms as i64 * 1000,
            every_ms,
        );
    }
}

/// Stops the watch; whether the handler suspected a deadlock meanwhile.
fn disarm(granted: bool) -> bool {
    unsafe {
        if TIMEOUT_ID >= 0 {
            disable_timeout(TIMEOUT_ID, false);
        }
        WATCHING.store(false, Ordering::SeqCst);
        let suspected = SUSPECTED.swap(false, Ordering::SeqCst);
        if suspected && granted {
            // The lock came before the cancel the handler asked for was
            // acted on: that cancel must not strike the caller's statement.
            pg_sys::QueryCancelPending = 0;
        }
        suspected
    }
}

enum Once {
    Granted,
    TimedOut,
    /// The handler cancelled the wait: verify.
    Suspected,
}

/// One wait in an internal subtransaction (only aborting one takes the
/// backend out of the lock's queue cleanly), bounded by `left_ms` when given.
/// Whether the statement has run past statement_timeout: its cancel is
/// the statement timeout's, not the watch's.
fn statement_timed_out() -> bool {
    let ms = unsafe { pg_sys::StatementTimeout };
    ms > 0
        && unsafe { pg_sys::GetCurrentTimestamp() - pg_sys::GetCurrentStatementStartTimestamp() }
            >= ms as i64 * 1000
}

/// What bounds one wait: `ours` ends it as TimedOut (distlock.lock's
/// p_timeout, what is left of it); `callers` is the caller's own
/// lock_timeout, what is left of it across waits taken up again, raised as
/// the caller's 55P03 when it runs out.
#[derive(Clone, Copy)]
struct Bounds {
    ours: Option<i32>,
    callers: Option<i32>,
}

fn wait_once(
    tag: &pg_sys::LOCKTAG,
    mode: pg_sys::LOCKMODE,
    session: bool,
    bounds: Bounds,
    backoff: i32,
) -> Once {
    let tag = *tag;
    let entered = crate::subtransaction::begin();
    let session_timeout = unsafe { pg_sys::LockTimeout };
    if let Some(ms) = bounds.ours.or(bounds.callers) {
        unsafe { pg_sys::LockTimeout = ms.max(1) };
    }
    arm(backoff);
    PgTryBuilder::new(move || {
        unsafe { pg_sys::LockAcquire(&tag, mode, session, false) };
        disarm(true);
        entered.release();
        Once::Granted
    })
    .catch_others(move |error: CaughtError| {
        let suspected = disarm(false);
        owners::end_wait();
        let code = match &error {
            CaughtError::PostgresError(report) | CaughtError::ErrorReport(report) => {
                Some(report.sql_error_code())
            }
            CaughtError::RustPanic { .. } => None,
        };
        unsafe { pg_sys::FlushErrorState() };
        entered.roll_back();
        // The lock may have been granted as the error struck (between the
        // grant and the interrupt check): a session lock outlives the
        // subtransaction's rollback, so it is held now.
        let granted = session && unsafe { crate::pg_compat::lock_held_by_me(&tag, mode) };
        let ours = code == Some(PgSqlErrorCode::ERRCODE_QUERY_CANCELED) && suspected && !statement_timed_out();
        if suspected && !ours {
            // Another error came first (a lock timeout, say): the cancel the
            // handler asked for must not strike the caller's next statement.
            unsafe { pg_sys::QueryCancelPending = 0 };
        }
        if granted {
            if ours {
                return Once::Granted; // the watch's cancel came too late: nothing to prove
            }
            // An error the caller sees as "not acquired" must leave nothing held.
            unsafe { pg_sys::LockRelease(&tag, mode, true) };
        }
        match code {
            Some(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE) if bounds.ours.is_some() => Once::TimedOut,
            // The watch's own cancel (a pg_cancel_backend at the same
            // instant is taken for it: see docs/locks.md).
            _ if ours => Once::Suspected,
            // A deadlock the server found, a cancel, statement_timeout, the
            // caller's own lock_timeout: as pg_advisory_lock would raise it.
            _ => error.rethrow(),
        }
    })
    .finally(move || unsafe { pg_sys::LockTimeout = session_timeout })
    .execute()
}

/// How a watched wait ended.
pub enum Waited {
    Granted,
    TimedOut,
}

/// Milliseconds left of `total_ms` since `started` (at least 1), None when
/// none is left.
fn left_of(total_ms: i32, started: pg_sys::TimestampTz) -> Option<i32> {
    let waited_ms = (unsafe { pg_sys::GetCurrentTimestamp() } - started) / 1000;
    let left = total_ms as i64 - waited_ms;
    (left > 0).then_some(left as i32)
}

/// Waits for `tag` in `mode` (within `timeout_ms` when given) as
/// LockAcquire does, watching for a deadlock through owners (the module's
/// comment): its victim gets 40P01 naming `what` (the lock, as the caller
/// called it). None (never waited) without the shared owner table: the
/// caller then waits as before.
pub fn wait(
    tag: &pg_sys::LOCKTAG,
    mode: pg_sys::LOCKMODE,
    session: bool,
    shared: bool,
    timeout_ms: Option<i32>,
    what: &dyn Fn() -> String,
) -> Option<Waited> {
    let key = ((tag.locktag_field2 as u64) << 32 | tag.locktag_field3 as u64) as i64;
    let started = unsafe { pg_sys::GetCurrentTimestamp() };
    let callers_timeout = unsafe { pg_sys::LockTimeout };
    let mut seq = None;
    let mut backoff = 1;
    loop {
        let bounds = Bounds {
            ours: match timeout_ms {
                None => None,
                Some(ms) => match left_of(ms, started) {
                    Some(left) => Some(left),
                    None => return Some(Waited::TimedOut),
                },
            },
            // Taken up again, a wait keeps the caller's lock_timeout from
            // its start (1 ms left when it has run out: LockAcquire raises it).
            callers: (callers_timeout > 0).then(|| left_of(callers_timeout, started).unwrap_or(1)),
        };
        let this = owners::begin_wait(key, shared, seq)?;
        seq = Some(this);
        let once = wait_once(tag, mode, session, bounds, backoff);
        owners::end_wait();
        match once {
            Once::Granted => return Some(Waited::Granted),
            Once::TimedOut => return Some(Waited::TimedOut),
            Once::Suspected => {
                if let Some(hops) = proven(tag.locktag_field1, key, shared, this, started) {
                    raise_deadlock(what(), hops);
                }
                backoff = backoff.saturating_mul(BACKOFF_FACTOR);
            }
        }
    }
}

/// The lock manager's view: each backend's pg_distlock-style advisory
/// locks (bigint keys) held and awaited, with owners and wait orders from
/// the shared table.
struct ManagerView {
    conns: Vec<Conn>,
}

struct Conn {
    pid: i32,
    node: u64,
    wait: Option<Wait>,
    /// (database, key, held mode mask)
    holds: Vec<(u32, i64, u32)>,
}

const SHARE_BIT: u32 = 1 << pg_sys::ShareLock;
const EXCLUSIVE_BIT: u32 = 1 << pg_sys::ExclusiveLock;

impl View for ManagerView {
    fn len(&self) -> usize {
        self.conns.len()
    }
    fn node(&self, conn: usize) -> u64 {
        self.conns[conn].node
    }
    fn waiting(&self, conn: usize) -> Option<Wait> {
        self.conns[conn].wait
    }
    fn blocks(&self, conn: usize, wait: &Wait) -> bool {
        let conflicts = if wait.exclusive { SHARE_BIT | EXCLUSIVE_BIT } else { EXCLUSIVE_BIT };
        self.conns[conn]
            .holds
            .iter()
            .any(|&(db, k, mask)| db == wait.database && k == wait.key && mask & conflicts != 0)
            || self.conns[conn].wait.is_some_and(|theirs| wait.queued_behind(&theirs))
    }
}

/// The cycle this backend's wait for `key` (order `seq`) closes, proven on
/// the lock manager's data; None when there is none (the suspicion was
/// stale) or it is one of backends only. Returns the owners it runs through.
fn proven(database: u32, key: i64, shared: bool, seq: u64, started: pg_sys::TimestampTz) -> Option<usize> {
    let table = table::table()?;
    let my_pid = unsafe { pg_sys::MyProcPid };
    let mut conns: Vec<Conn> = Vec::new();
    let entry_of = |pid: i32| table.entries().iter().find(|e| e.pid.load(ORDER) == pid);
    // What the table lists as held, before the lock manager is read: a
    // listing it does not confirm is marked stale (at its generation, so a
    // rewrite since counts again), and no later suspicion rests on it.
    let mut listed: Vec<(i32, &crate::shared::lock_owners::Held, i64, u8, u32)> = Vec::new();
    for entry in table.entries() {
        let pid = entry.pid.load(ORDER);
        if pid == 0 || entry.database.load(ORDER) != database {
            continue;
        }
        for slot in &entry.held {
            let generation = slot.generation.load(ORDER);
            if let Some((k, mode)) = slot.listed() {
                listed.push((pid, slot, k, mode, generation));
            }
        }
    }
    unsafe {
        let data = pg_sys::GetLockStatusData();
        let locks = std::slice::from_raw_parts((*data).locks, (*data).nelements.max(0) as usize);
        for lock in locks {
            let tag = &lock.locktag;
            if tag.locktag_type != pg_sys::LockTagType::LOCKTAG_ADVISORY as u8
                || tag.locktag_field4 != 1
                || lock.pid == 0
            {
                continue;
            }
            let lock_key = ((tag.locktag_field2 as u64) << 32 | tag.locktag_field3 as u64) as i64;
            let index = match conns.iter().position(|c| c.pid == lock.pid) {
                Some(index) => index,
                None => {
                    let node = node_of(
                        entry_of(lock.pid).map_or(0, |e| e.owner_hash.load(ORDER)),
                        lock.pid,
                    );
                    conns.push(Conn {
                        pid: lock.pid,
                        node,
                        wait: None,
                        holds: Vec::new(),
                    });
                    conns.len() - 1
                }
            };
            if lock.holdMask != 0 {
                conns[index]
                    .holds
                    .push((tag.locktag_field1, lock_key, lock.holdMask as u32));
            }
            if lock.waitLockMode != pg_sys::NoLock as i32 {
                // A wait not made through pg_distlock counts as the oldest.
                let their_seq = entry_of(lock.pid)
                    .filter(|e| e.wait_mode.load(ORDER) != 0 && e.wait_key.load(ORDER) == lock_key)
                    .map_or(0, |e| e.wait_seq.load(ORDER));
                conns[index].wait = Some(Wait {
                    database: tag.locktag_field1,
                    key: lock_key,
                    exclusive: lock.waitLockMode == pg_sys::ExclusiveLock as i32,
                    seq: their_seq,
                    order: if lock.waitStart != 0 { lock.waitStart } else { i64::MAX },
                });
            }
        }
    }
    // This backend left the queue to verify: its wait is the one to prove.
    let me = match conns.iter().position(|c| c.pid == my_pid) {
        Some(index) => index,
        None => {
            let node = node_of(
                table::my_entry(table).map_or(0, |e| e.owner_hash.load(ORDER)),
                my_pid,
            );
            conns.push(Conn {
                pid: my_pid,
                node,
                wait: None,
                holds: Vec::new(),
            });
            conns.len() - 1
        }
    };
    conns[me].wait = Some(Wait { database, key, exclusive: !shared, seq, order: started });
    for (pid, slot, k, mode, generation) in listed {
        let bit = if mode == 2 { EXCLUSIVE_BIT } else { SHARE_BIT };
        let confirmed = conns
            .iter()
            .any(|c| c.pid == pid && c.holds.iter().any(|&(db, hk, mask)| db == database && hk == k && mask & bit != 0));
        if !confirmed {
            slot.stale.store(generation, ORDER);
        }
    }
    let view = ManagerView { conns };
    let cycle = cycle_closed_by(&view, me)?;
    if cycle.of_backends_only() {
        return None;
    }
    let mut owners: Vec<u64> = cycle
        .hops()
        .iter()
        .map(|&(waiter, _)| view.node(waiter))
        .collect();
    owners.sort_unstable();
    owners.dedup();
    Some(owners.len())
}

fn raise_deadlock(what: String, owners: usize) -> ! {
    let owner = crate::gucs::OWNER
        .get()
        .map(|o| o.to_string_lossy().into_owned())
        .unwrap_or_default();
    let who = if owner.is_empty() {
        "this connection".to_string()
    } else {
        format!("owner \"{owner}\"")
    };
    let through = if owners == 1 {
        "its own other connections".to_string()
    } else {
        format!("{owners} owners")
    };
    crate::errors::raise_with_hint(
        PgSqlErrorCode::ERRCODE_T_R_DEADLOCK_DETECTED,
        format!(
            "deadlock detected across connections: {who} waits for {what}, whose holders wait, through {through}, \
             for locks {who} holds"
        ),
        "This wait was given up so that the others can go on: release the locks this owner holds and try again. \
         distlock.owner names one thread of control (the Python client gives each thread and task its own).",
    )
}
