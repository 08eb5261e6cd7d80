//! Taking and dropping advisory locks through PostgreSQL's lock manager.
//!
//! Keys live in the same space as `pg_advisory_lock(bigint)`, so
//! `distlock.lock(42)` and `pg_advisory_lock(42)` are one lock. Waiting is
//! the lock manager's own: queue order and deadlock detection are kept.
//! A bounded wait runs inside an internal subtransaction with the lock
//! timeout set for just that wait, which is the only safe way to recover
//! from the timeout error and leave nothing behind.

use pgrx::pg_sys;

use crate::lock_wait::acquire_within;

/// How long a lock call may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Try once.
    No,
    /// Until granted (the session's lock_timeout and statement_timeout still apply).
    Unbounded,
    /// Up to this many milliseconds.
    UpTo(i32),
}

/// Lock mode and duration of one hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Hold {
    pub key: i64,
    pub shared: bool,
    pub xact: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Granted; `waited_us` is Some when the call had to wait.
    Granted { waited_us: Option<i64> },
    /// Not granted: busy and no waiting allowed.
    Busy,
    /// Not granted within the allowed time, after waiting this many microseconds.
    TimedOut(i64),
}

/// The lock tag `pg_advisory_lock(bigint)` uses for `key` in this database.
fn tag(key: i64) -> pg_sys::LOCKTAG {
    pg_sys::LOCKTAG {
        locktag_field1: unsafe { pg_sys::MyDatabaseId }.to_u32(),
        locktag_field2: ((key as u64) >> 32) as u32,
        locktag_field3: key as u32,
        locktag_field4: 1,
        locktag_type: pg_sys::LockTagType::LOCKTAG_ADVISORY as u8,
        locktag_lockmethodid: pg_sys::USER_LOCKMETHOD as u8,
    }
}

fn mode(shared: bool) -> pg_sys::LOCKMODE {
    (if shared {
        pg_sys::ShareLock
    } else {
        pg_sys::ExclusiveLock
    }) as pg_sys::LOCKMODE
}

/// Takes one hold of `hold`, waiting as `wait` allows; a wait that closes
/// a deadlock through owners raises 40P01 naming `what` (owner_wait.rs).
pub fn acquire(hold: Hold, wait: Wait, what: &dyn Fn() -> String) -> Outcome {
    let tag = tag(hold.key);
    let mode = mode(hold.shared);
    let session = !hold.xact;
    let first = unsafe { pg_sys::LockAcquire(&tag, mode, session, true) };
    if first == pg_sys::LockAcquireResult::LOCKACQUIRE_OK {
        // Held by none of this backend's holds before: whatever the owner
        // table's bookkeeping still counted was dropped behind its back.
        super::owners::first_hold(hold.key, hold.shared);
    }
    if first != pg_sys::LockAcquireResult::LOCKACQUIRE_NOT_AVAIL {
        return Outcome::Granted { waited_us: None };
    }
    // A wait is only ever for a lock this backend does not hold.
    super::owners::first_hold(hold.key, hold.shared);
    let started = unsafe { pg_sys::GetCurrentTimestamp() };
    let waited = || unsafe { pg_sys::GetCurrentTimestamp() } - started;
    let timeout_ms = match wait {
        Wait::No => None,
        Wait::Unbounded => Some(None),
        Wait::UpTo(ms) => Some(Some(ms)),
    };
    if let Some(timeout_ms) = timeout_ms {
        match super::owner_wait::wait(&tag, mode, session, hold.shared, timeout_ms, what) {
            Some(super::owner_wait::Waited::Granted) => return Outcome::Granted { waited_us: Some(waited()) },
            Some(super::owner_wait::Waited::TimedOut) => return Outcome::TimedOut(waited()),
            None => {} // no shared owner table: the lock manager's wait alone
        }
    }
    match wait {
        Wait::No => Outcome::Busy,
        Wait::Unbounded => {
            unsafe { pg_sys::LockAcquire(&tag, mode, session, false) };
            Outcome::Granted { waited_us: Some(waited()) }
        }
        Wait::UpTo(ms) => {
            if acquire_within(&tag, mode, session, ms) {
                Outcome::Granted { waited_us: Some(waited()) }
            } else {
                Outcome::TimedOut(waited())
            }
        }
    }
}

/// Drops one session-level hold; false (and no WARNING) when none is held.
pub fn release(key: i64, shared: bool) -> bool {
    let tag = tag(key);
    let mode = mode(shared);
    unsafe { crate::pg_compat::lock_held_by_me(&tag, mode) && pg_sys::LockRelease(&tag, mode, true) }
}
