//! The advisory-lock key space reserved for task claims.
//!
//! Task locks use PostgreSQL's two-int4 advisory key form with a fixed class
//! id, so they can never collide with an application's own
//! `pg_advisory_lock(bigint)` calls. In `pg_locks` they appear with
//! `objsubid = 2`, `classid = distlock.task_lock_class()` and `objid = task id`.
//! Locks are taken through the lock manager directly: that is what
//! `pg_try_advisory_lock(int, int)` does, minus the function-call overhead,
//! and it tells us whether this backend already held the lock.

use pgrx::pg_sys;
use pgrx::prelude::*;

/// "dlck": the advisory-lock class id of pg_distlock task claims.
pub const TASK_LOCK_CLASS: i32 = 0x646c_636b;

/// The class id that marks pg_distlock task locks in `pg_locks.classid`.
#[pg_extern(immutable, parallel_safe)]
pub fn task_lock_class() -> i32 {
    TASK_LOCK_CLASS
}

/// The 64-bit form of a task's lock key, as stored in `task_execution_log.lock_id`.
pub fn task_lock_id(task_id: i32) -> i64 {
    ((TASK_LOCK_CLASS as i64) << 32) | (task_id as u32 as i64)
}

fn task_lock_tag(task_id: i32) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: TASK_LOCK_CLASS as u32,
        locktag_field3: task_id as u32,
        locktag_field4: 2,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

/// Classes of the transaction-level locks that order the grants of one
/// lease name ("dlls") or election group ("dlel"): a grant draws its token
/// while holding the lock, so a grant that comes later always draws a larger
/// one, even when the previous holder's row was deleted in between (a row
/// lock cannot order an insert against a row that is gone).
pub const LEASE_GRANT_CLASS: i32 = 0x646c_6c73;
pub const TERM_GRANT_CLASS: i32 = 0x646c_656c;

/// Waits for the transaction-level lock ordering grants of `name` in
/// `class` (held to commit, like the row the grant writes). Two names whose
/// hashes share 32 bits merely take turns.
pub fn lock_grants_until_commit(class: i32, name: &[u8]) {
    let tag = pg_sys::LOCKTAG {
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: class as u32,
        locktag_field3: crate::hashing::key_for_name(name) as u32,
        locktag_field4: 2,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    };
    unsafe { pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false, false) };
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

/// Tries to take a task's session-level lock without waiting.
pub fn try_lock_task(task_id: i32) -> TryLock {
    let tag = task_lock_tag(task_id);
    let mode = pg_sys::ExclusiveLock as pg_sys::LOCKMODE;
    let result = unsafe { pg_sys::LockAcquire(&tag, mode, true, true) };
    match result {
        pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL => TryLock::Busy,
        pg_sys::LockAcquireResult::LOCKACQUIRE_ALREADY_HELD
        | pg_sys::LockAcquireResult::LOCKACQUIRE_ALREADY_CLEAR => {
            // Advisory locks are re-entrant: undo the extra hold we just counted.
            unsafe { pg_sys::LockRelease(&tag, mode, true) };
            TryLock::AlreadyHeld
        }
        _ => TryLock::Acquired,
    }
}

/// Tries to take a task's lock until the current transaction ends, without
/// waiting: what a lease-mode claim holds while it writes, so that it never
/// overlaps a live session claim. `AlreadyHeld` means this backend holds it
/// (a session claim of its own, or a claim earlier in this transaction).
pub fn try_lock_task_for_transaction(task_id: i32) -> TryLock {
    let tag = task_lock_tag(task_id);
    let result = unsafe { pg_sys::LockAcquire(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false, true) };
    match result {
        pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL => TryLock::Busy,
        pg_sys::LockAcquireResult::LOCKACQUIRE_ALREADY_HELD
        | pg_sys::LockAcquireResult::LOCKACQUIRE_ALREADY_CLEAR => TryLock::AlreadyHeld,
        _ => TryLock::Acquired,
    }
}

/// Gives back a task lock taken by `try_lock_task_for_transaction` before
/// the transaction ends (the claim it guarded did not happen).
pub fn unlock_task_for_transaction(task_id: i32) {
    let tag = task_lock_tag(task_id);
    unsafe { pg_sys::LockRelease(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, false) };
}

/// Releases one session-level hold of a task's lock; false if none was held.
pub fn unlock_task(task_id: i32) -> bool {
    let tag = task_lock_tag(task_id);
    unsafe { pg_sys::LockRelease(&tag, pg_sys::ExclusiveLock as pg_sys::LOCKMODE, true) }
}

/// Whether this backend holds the task's lock.
pub fn holds_task_lock(task_id: i32) -> bool {
    match try_lock_task(task_id) {
        TryLock::AlreadyHeld => true,
        TryLock::Busy => false,
        TryLock::Acquired => {
            unlock_task(task_id);
            false
        }
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use super::*;

    #[pg_test]
    fn lock_keys_task_locks_use_the_reserved_int4_pair_space() {
        assert_eq!(try_lock_task(42), TryLock::Acquired);
        let row = Spi::get_two::<i64, i32>(&format!(
            "SELECT classid::bigint, objid::int FROM pg_locks \
             WHERE locktype = 'advisory' AND objsubid = 2 AND pid = pg_backend_pid() \
               AND classid = {TASK_LOCK_CLASS}::oid"
        ))
        .expect("query runs");
        assert_eq!(row, (Some(TASK_LOCK_CLASS as i64), Some(42)));
        // The same number as a bigint key is a different lock.
        let bigint_free = Spi::get_one::<bool>(&format!(
            "SELECT pg_try_advisory_lock({})",
            task_lock_id(42)
        ))
        .expect("query runs");
        assert_eq!(bigint_free, Some(true));
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
