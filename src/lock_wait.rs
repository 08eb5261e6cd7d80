//! Waiting a bounded time for a heavyweight lock.
//!
//! A lock timeout is an ERROR, and only aborting a (sub)transaction takes
//! the backend out of the lock's wait queue cleanly, so the wait runs in an
//! internal subtransaction with `lock_timeout` set for just that wait. Used
//! by the lock calls with timeouts and by pg_distlock's own grant locks.
//!
//! pg_distlock's own statements that queue on a row (a lease, a semaphore,
//! an election) run under `bounded_waits()`: where the caller set no
//! `lock_timeout`, they give up after `INTERNAL_WAIT_MS` with 55P03 instead
//! of waiting as long as another transaction keeps the row.

use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::PgTryBuilder;
use pgrx::PgSqlErrorCode;

/// How long pg_distlock waits for a lock held by another transaction when
/// `lock_timeout` is not set.
pub const INTERNAL_WAIT_MS: i32 = 10_000;

/// The wait allowed for an internal lock: `lock_timeout`, or
/// `INTERNAL_WAIT_MS` when it is not set.
pub fn internal_wait_ms() -> i32 {
    match unsafe { pg_sys::LockTimeout } {
        0 => INTERNAL_WAIT_MS,
        set => set,
    }
}

/// While alive, lock waits (row locks included) end after
/// `internal_wait_ms()`; dropping it, also when an ERROR unwinds, restores
/// the caller's `lock_timeout`. Setting the variable costs nothing; the
/// timer starts only when a wait does.
pub struct BoundedWaits {
    saved: i32,
}

pub fn bounded_waits() -> BoundedWaits {
    let saved = unsafe { pg_sys::LockTimeout };
    unsafe { pg_sys::LockTimeout = internal_wait_ms() };
    BoundedWaits { saved }
}

impl Drop for BoundedWaits {
    fn drop(&mut self) {
        unsafe { pg_sys::LockTimeout = self.saved };
    }
}

/// Waits up to `ms` for the lock in an internal subtransaction: a lock
/// timeout is an ERROR, and only aborting a (sub)transaction takes the
/// backend out of the lock's wait queue cleanly.
pub fn acquire_within(tag: &pg_sys::LOCKTAG, mode: pg_sys::LOCKMODE, session: bool, ms: i32) -> bool {
    let tag = *tag;
    let entered = crate::subtransaction::begin();
    let session_timeout = unsafe { pg_sys::LockTimeout };
    unsafe { pg_sys::LockTimeout = ms.max(1) };
    PgTryBuilder::new(move || {
        unsafe { pg_sys::LockAcquire(&tag, mode, session, false) };
        entered.release();
        true
    })
    .catch_when(PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, move |_| {
        unsafe { pg_sys::FlushErrorState() };
        entered.roll_back();
        false
    })
    .catch_others(move |error: CaughtError| {
        // A deadlock (40P01), a cancel, statement_timeout: the caller
        // sees it as it would from pg_advisory_lock.
        unsafe { pg_sys::FlushErrorState() };
        entered.roll_back();
        error.rethrow()
    })
    .finally(move || unsafe { pg_sys::LockTimeout = session_timeout })
    .execute()
}
