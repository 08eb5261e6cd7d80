//! Waiting for jobs without polling.
//!
//! With pg_distlock preloaded, a consumer that found nothing sleeps on a
//! condition variable in shared memory (one slot per database, shared by
//! databases whose OIDs collide). A transaction that may have made a job
//! claimable wakes the slot once it has committed, when its rows are
//! visible to the sleepers' next snapshot: an enqueue, a failed attempt (its
//! retry time is new), and a claim (its lease expiry is new, and a sleeper
//! that lost the race for the job must look again). A claim rolled back puts
//! its jobs back, so its abort wakes the slot too. Jobs that become
//! claimable with time alone (a run_after coming, a lease running out) need
//! no one to commit: the sleeper computes when the next one is due and
//! sleeps until then.
//!
//! Without preload there is no shared memory to sleep on: the sleeper looks
//! again every POLL_INTERVAL_MS, still inside the server.

use std::cell::Cell;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::shared::{self, QueueWakeSlot};
use crate::xact;

/// How often a consumer looks for jobs while it waits without preload.
pub const POLL_INTERVAL_MS: i64 = 100;

thread_local! {
    /// Whether this transaction already has its wake-up at commit (or at
    /// abort) registered: one per transaction, however many jobs it touches.
    static WAKE_AT_COMMIT: Cell<bool> = const { Cell::new(false) };
    static WAKE_AT_ABORT: Cell<bool> = const { Cell::new(false) };
}

fn slot() -> Option<&'static QueueWakeSlot> {
    shared::queue_wake_slot(unsafe { pg_sys::MyDatabaseId })
}

fn wake(only_if_sleeping: bool) {
    if let Some(slot) = slot() {
        if !only_if_sleeping || slot.sleepers.load(std::sync::atomic::Ordering::Acquire) > 0 {
            unsafe { pg_sys::ConditionVariableBroadcast(std::ptr::addr_of!(slot.cv).cast_mut()) };
        }
    }
}

fn register_once(flag: &'static std::thread::LocalKey<Cell<bool>>, register: impl FnOnce()) {
    if slot().is_none() || flag.with(Cell::get) {
        return;
    }
    flag.with(|f| f.set(true));
    register();
    xact::at_end(Box::new(move || flag.with(|f| f.set(false))));
}

/// This transaction added a job, or scheduled a retry: wake sleepers once it commits.
pub fn jobs_added() {
    register_once(&WAKE_AT_COMMIT, || xact::after_commit(Box::new(|| wake(false))));
}

/// This transaction claimed jobs: at commit, sleepers learn the new lease
/// expiry; at abort, the jobs are claimable again.
pub fn jobs_claimed() {
    register_once(&WAKE_AT_COMMIT, || xact::after_commit(Box::new(|| wake(true))));
    register_once(&WAKE_AT_ABORT, || xact::on_outcome(None, Some(Box::new(|| wake(true)))));
}

/// A consumer between two looks at the queue. Made before the look that
/// precedes its first sleep, so that a commit landing between that look and
/// the sleep still wakes it.
pub struct Sleeper {
    slot: Option<&'static QueueWakeSlot>,
}

impl Sleeper {
    pub fn new() -> Self {
        let slot = slot();
        if let Some(slot) = slot {
            slot.sleepers.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            unsafe { pg_sys::ConditionVariablePrepareToSleep(std::ptr::addr_of!(slot.cv).cast_mut()) };
        }
        Sleeper { slot }
    }

    /// Sleeps up to `ms` milliseconds, less when woken; raises on cancel,
    /// statement_timeout or termination.
    pub fn sleep(&self, ms: i64) {
        let ms = ms.clamp(1, i32::MAX as i64);
        match self.slot {
            Some(slot) => unsafe {
                pg_sys::ConditionVariableTimedSleep(
                    std::ptr::addr_of!(slot.cv).cast_mut(),
                    ms as std::ffi::c_long,
                    crate::pg_compat::queue_wait_event(),
                );
            },
            None => unsafe {
                pg_sys::WaitLatch(
                    pg_sys::MyLatch,
                    (pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
                    ms.min(POLL_INTERVAL_MS) as std::ffi::c_long,
                    crate::pg_compat::queue_wait_event(),
                );
                pg_sys::ResetLatch(pg_sys::MyLatch);
            },
        }
        check_for_interrupts!();
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            slot.sleepers.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            unsafe { pg_sys::ConditionVariableCancelSleep() };
        }
    }
}
