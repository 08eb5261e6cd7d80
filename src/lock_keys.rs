//! The lock tags reserved for pg_distlock's own locks.
//!
//! Task claims and the locks that order lease and election grants are
//! advisory-type locks in a key space no SQL function can name: PostgreSQL's
//! `pg_advisory_*` functions build their tags with `locktag_field4` 1 (bigint
//! key) or 2 (two int4 keys), and these use `RESERVED_KIND`, so no session
//! can take, hold or squat on them with plain SQL. In `pg_locks` they appear
//! with `objsubid = 25708`, `classid` the class below and `objid` the task
//! id (or a name's hash). Locks are taken through the lock manager directly.
//!
//! Until 0.2.0 task locks used `field4 = 2`, which `pg_advisory_lock(int,
//! int)` reaches. A backend that loaded 0.2.0's library before the update
//! (without preload, old sessions keep it) still claims with that legacy tag,
//! so a session claim also takes the legacy tag when it is free, and a busy
//! legacy tag blocks a claim only when a live running claim stands behind it
//! (see tasks/claim.rs). Drop the legacy tag once no 0.2.0 library can run.

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

/// "dlck": the class id of pg_distlock task claims.
pub const TASK_LOCK_CLASS: i32 = 0x646c_636b;

/// `locktag_field4` of pg_distlock's own locks ("dl"); an int2, as pg_locks
/// shows it in `objsubid`. The `pg_advisory_*` functions only make 1 and 2.
pub const RESERVED_KIND: u16 = 0x646c;

/// The `locktag_field4` of task locks up to 0.2.0.
const LEGACY_KIND: u16 = 2;

/// `locktag_field4` of a session claim's own lock ("dm", 25709 in
/// `pg_locks.objsubid`): `objid`/`field2` the task id, `field3` the low 32
/// bits of the claim's fencing token. The task lock says that a claim runs;
/// this one says which, so a fencing check can ask whether the holder still
/// holds *this* claim (a backend that lost its claim and claimed the task
/// again holds another one).
const CLAIM_KIND: u16 = 0x646d;

/// The class id that marks pg_distlock task locks in `pg_locks.classid`.
#[pg_extern(immutable, parallel_safe)]
pub fn task_lock_class() -> i32 {
    TASK_LOCK_CLASS
}

/// The 64-bit form of a task's lock key, as stored in `task_execution_log.lock_id`.
pub fn task_lock_id(task_id: i32) -> i64 {
    ((TASK_LOCK_CLASS as i64) << 32) | (task_id as u32 as i64)
}

fn reserved_tag(class: i32, key: u32, kind: u16) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: class as u32,
        locktag_field3: key,
        locktag_field4: kind,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

fn task_lock_tag(task_id: i32) -> pg_sys::LOCKTAG {
    reserved_tag(TASK_LOCK_CLASS, task_id as u32, RESERVED_KIND)
}

fn legacy_task_lock_tag(task_id: i32) -> pg_sys::LOCKTAG {
    reserved_tag(TASK_LOCK_CLASS, task_id as u32, LEGACY_KIND)
}

/// Classes of the transaction-level locks that order the grants of one
/// lease name ("dlls") or election group ("dlel"): a grant draws its token
/// while holding the lock, so a grant that comes later always draws a larger
/// one, even when the previous holder's row was deleted in between (a row
/// lock cannot order an insert against a row that is gone).
pub const LEASE_GRANT_CLASS: i32 = 0x646c_6c73;
pub const TERM_GRANT_CLASS: i32 = 0x646c_656c;

/// Takes the transaction-level lock ordering the grants of `name` in
/// `class` (held to commit, like the row the grant writes). Two names whose
/// keyed hashes share 32 bits merely take turns (by chance: the key is
/// secret, see lock_key_secret.rs). Waits at most `lock_timeout`
/// (10 s when it is not set), then raises 55P03 naming `what`.
pub fn lock_grants_until_commit(class: i32, name: &[u8], what: impl FnOnce() -> String) {
    let tag = reserved_tag(class, crate::lock_key_secret::name_key(class, name), RESERVED_KIND);
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    let free = unsafe { pg_sys::LockAcquire(&tag, mode, false, true) }
        != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL;
    if free {
        return;
    }
    let wait_ms = crate::lock_wait::internal_wait_ms();
    if !crate::lock_wait::acquire_within(&tag, mode, false, wait_ms) {
        crate::errors::raise_with_hint(
            PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
            format!("gave up after {wait_ms} ms waiting for another transaction that is granting {}", what()),
            "That transaction holds the grant until it ends; commit it, or set lock_timeout to wait longer.",
        );
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TryLock {
    /// This call took the lock.
    Acquired,
    /// This backend already held it; nothing changed.
    AlreadyHeld,
    /// Another backend holds it.
    Busy,
}

/// Tries to take `tag` exclusively without waiting, for the session or
/// until the transaction ends. A session lock this backend already held is
/// re-entrant: the extra hold just counted is undone.
fn try_lock(tag: &pg_sys::LOCKTAG, session: bool) -> TryLock {
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    match unsafe { pg_sys::LockAcquire(tag, mode, session, true) } {
        pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL => TryLock::Busy,
        pg_sys::LockAcquireResult::LOCKACQUIRE_ALREADY_HELD
        | pg_sys::LockAcquireResult::LOCKACQUIRE_ALREADY_CLEAR => {
            if session {
                unsafe { pg_sys::LockRelease(tag, mode, true) };
            }
            TryLock::AlreadyHeld
        }
        _ => TryLock::Acquired,
    }
}

/// Class of the transaction-level lock ("dlql") that claims of a queue with
/// a concurrency limit take in turn: the holder counts the queue's
/// processing jobs and claims up to the limit, and its claims are committed
/// before the next holder counts.
pub const QUEUE_LIMIT_CLASS: i32 = 0x646c_716c;

/// Claim turns per limited queue at most: claims of one queue run this many
/// at a time.
pub const QUEUE_TURNS: u32 = 16;

/// Turn `turn` of queue `queue`: the turn in the low bits of the queue's
/// keyed hash (two queues whose hashes share the other 28 bits merely share
/// turns, by chance: the key is secret).
fn queue_turn_tag(queue: &[u8], turn: u32) -> pg_sys::LOCKTAG {
    let hash = crate::lock_key_secret::name_key(QUEUE_LIMIT_CLASS, queue);
    reserved_tag(QUEUE_LIMIT_CLASS, (hash & !(QUEUE_TURNS - 1)) | (turn % QUEUE_TURNS), RESERVED_KIND)
}

/// Tries to take claim turn `turn` of queue `queue` until the transaction
/// ends, without waiting.
pub fn try_lock_queue_turn(queue: &[u8], turn: u32) -> TryLock {
    try_lock(&queue_turn_tag(queue, turn), false)
}

/// Whether another backend holds claim turn `turn` of `queue`: read from
/// the lock table without taking the turn, so that looking does not make
/// the turn seem taken to others looking at the same moment.
pub fn queue_turn_held_by_another(queue: &[u8], turn: u32) -> bool {
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    let mut holders = 0;
    // Our own backend is never among the conflicts it lists.
    unsafe { pg_sys::GetLockConflicts(&queue_turn_tag(queue, turn), mode, &mut holders) };
    holders > 0
}

/// Gives back a turn taken by `try_lock_queue_turn` (nothing was claimed in it).
pub fn unlock_queue_turn(queue: &[u8], turn: u32) {
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    unsafe { pg_sys::LockRelease(&queue_turn_tag(queue, turn), mode, false) };
}

/// Tries to take a task's session-level lock without waiting.
pub fn try_lock_task(task_id: i32) -> TryLock {
    try_lock(&task_lock_tag(task_id), true)
}

/// Tries to take a task's lock until the current transaction ends, without
/// waiting: what a lease-mode claim holds while it writes, so that it never
/// overlaps a live session claim. `AlreadyHeld` means this backend holds it
/// (a session claim of its own, or a claim earlier in this transaction).
pub fn try_lock_task_for_transaction(task_id: i32) -> TryLock {
    try_lock(&task_lock_tag(task_id), false)
}

/// Gives back a task lock taken by `try_lock_task_for_transaction` before
/// the transaction ends (the claim it guarded did not happen).
pub fn unlock_task_for_transaction(task_id: i32) {
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    let tag = task_lock_tag(task_id);
    unsafe { pg_sys::LockRelease(&tag, mode, false) };
}

/// The claim's lock; its 64-bit key, `task_id << 32 | token as u32`, is what
/// sql/queries/claim_task.sql logs in `task_execution_log.lock_id`.
fn claim_lock_tag(task_id: i32, token: i64) -> pg_sys::LOCKTAG {
    reserved_tag(task_id, token as u32, CLAIM_KIND)
}

thread_local! {
    /// The claim lock this session took for each task it claimed (its token).
    static CLAIM_LOCKS: std::cell::RefCell<std::collections::HashMap<i32, i64>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// Takes the session-level lock of claim `token` of `task_id`, which this
/// session has just claimed; `unlock_task` gives it back with the task lock.
/// No other session can want it: the tag is this claim's alone.
pub fn lock_claim(task_id: i32, token: i64) {
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    unsafe { pg_sys::LockAcquire(&claim_lock_tag(task_id, token), mode, true, true) };
    CLAIM_LOCKS.with_borrow_mut(|locks| locks.insert(task_id, token));
}

/// Gives back this session's claim lock of `task_id`, if it still holds one
/// (DISCARD ALL may have dropped it already).
fn unlock_claim(task_id: i32) {
    let Some(token) = CLAIM_LOCKS.with_borrow_mut(|locks| locks.remove(&task_id)) else {
        return;
    };
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    let tag = claim_lock_tag(task_id, token);
    unsafe {
        if crate::pg_compat::lock_held_by_me(&tag, mode) {
            pg_sys::LockRelease(&tag, mode, true);
        }
    }
}

/// Whether this session holds the lock of claim `token` of `task_id`.
pub fn holds_claim_lock(task_id: i32, token: i64) -> bool {
    unsafe { crate::pg_compat::lock_held_by_me(&claim_lock_tag(task_id, token), pg_sys::ExclusiveLock as pg_sys::LOCKMODE) }
}

/// Whether backend `pid` holds the lock of claim `token` of `task_id`.
pub fn backend_holds_claim(pid: i32, task_id: i32, token: i64) -> bool {
    crate::proc_locks::backend_holds(pid, &claim_lock_tag(task_id, token), pg_sys::ExclusiveLock as pg_sys::LOCKMODE)
}

/// Whether backend `pid` holds the lock of any claim of `task_id`.
pub fn backend_holds_any_claim(pid: i32, task_id: i32) -> bool {
    let like = claim_lock_tag(task_id, 0);
    crate::proc_locks::backend_holds_any(pid, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, |held| {
        held.locktag_field1 == like.locktag_field1
            && held.locktag_field2 == like.locktag_field2
            && held.locktag_field4 == like.locktag_field4
            && held.locktag_type == like.locktag_type
            && held.locktag_lockmethodid == like.locktag_lockmethodid
    })
}

/// Releases one session-level hold of a task's lock (and of its legacy tag
/// and its claim lock, when this session holds those too); false if none
/// was held.
pub fn unlock_task(task_id: i32) -> bool {
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    let legacy = legacy_task_lock_tag(task_id);
    unlock_claim(task_id);
    unsafe {
        if crate::pg_compat::lock_held_by_me(&legacy, mode) {
            pg_sys::LockRelease(&legacy, mode, true);
        }
        let tag = task_lock_tag(task_id);
        crate::pg_compat::lock_held_by_me(&tag, mode) && pg_sys::LockRelease(&tag, mode, true)
    }
}

/// Tries to take a task's legacy (0.2.0) tag without waiting, for a session
/// (`session`) or until the transaction ends, so that a backend still
/// running 0.2.0's library cannot claim the task beside this claim.
pub fn try_lock_legacy_task(task_id: i32, session: bool) -> TryLock {
    try_lock(&legacy_task_lock_tag(task_id), session)
}

/// Who holds a task's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskLockHolder {
    ThisBackend,
    AnotherBackend,
    Nobody,
}

/// Who holds the task's (reserved) lock; the legacy tag is left as it is.
pub fn task_lock_holder(task_id: i32) -> TaskLockHolder {
    holder_of(&task_lock_tag(task_id))
}

/// Who holds `tag`, learnt by taking it for an instant when it is free.
fn holder_of(tag: &pg_sys::LOCKTAG) -> TaskLockHolder {
    match try_lock(tag, true) {
        TryLock::AlreadyHeld => TaskLockHolder::ThisBackend,
        TryLock::Busy => TaskLockHolder::AnotherBackend,
        TryLock::Acquired => {
            unsafe { pg_sys::LockRelease(tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, true) };
            TaskLockHolder::Nobody
        }
    }
}

/// Whether this backend holds the task's lock.
pub fn holds_task_lock(task_id: i32) -> bool {
    task_lock_holder(task_id) == TaskLockHolder::ThisBackend
}

/// Whether backend `pid` (another one) holds the task's lock: the reserved
/// tag, or, for a claim made by 0.2.0's library, only the legacy tag while
/// no backend holds the reserved one (a later claim takes the reserved tag).
pub fn backend_holds_task_lock(pid: i32, task_id: i32) -> bool {
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    crate::proc_locks::backend_holds(pid, &task_lock_tag(task_id), mode)
        || (crate::proc_locks::backend_holds(pid, &legacy_task_lock_tag(task_id), mode)
            && task_lock_holder(task_id) == TaskLockHolder::Nobody)
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use super::*;

    #[pg_test]
    fn lock_keys_task_locks_use_a_kind_no_sql_function_makes() {
        assert_eq!(try_lock_task(42), TryLock::Acquired);
        let row = Spi::get_two::<i64, i32>(&format!(
            "SELECT classid::bigint, objid::int FROM pg_locks \
             WHERE locktype = 'advisory' AND objsubid = {RESERVED_KIND} AND pid = pg_backend_pid() \
               AND classid = {TASK_LOCK_CLASS}::oid"
        ))
        .expect("query runs");
        assert_eq!(row, (Some(TASK_LOCK_CLASS as i64), Some(42)));
        // Neither SQL form of the same numbers is the same lock.
        let free = Spi::get_one::<bool>(&format!(
            "SELECT pg_try_advisory_lock({}) AND pg_try_advisory_lock({TASK_LOCK_CLASS}, 42)",
            task_lock_id(42)
        ))
        .expect("query runs");
        assert_eq!(free, Some(true));
        assert!(unlock_task(42));
        assert!(!unlock_task(42));
    }

    #[pg_test]
    fn lock_keys_reentrant_hold_is_reported_and_not_counted() {
        assert_eq!(try_lock_task(7), TryLock::Acquired);
        assert_eq!(try_lock_task(7), TryLock::AlreadyHeld);
        assert!(holds_task_lock(7));
        assert!(unlock_task(7));
        assert!(!holds_task_lock(7));
    }

    #[pg_test]
    fn lock_keys_lock_id_packs_class_and_task() {
        assert_eq!(task_lock_id(1) >> 32, TASK_LOCK_CLASS as i64);
        assert_eq!(task_lock_id(1) & 0xffff_ffff, 1);
    }
}
