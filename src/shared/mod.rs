//! Shared memory: per-worker-id snowflake state, lock-call telemetry in
//! LWLock-protected partitions (and the LWLocks of the rate-limit
//! partitions), the condition variables the job queue's waiting consumers
//! slept on before 0.3.0 (kept for backends still running an older library),
//! and, beside them, the rate-limit table (`rate_table`), the table of
//! waiting consumers (`sleepers`) and the log of commits that made jobs
//! runnable (`runnable_log`), and the per-queue job counters
//! (`queue_counters`). It comes
//! from one of two places:
//! - pg_distlock in shared_preload_libraries: the server's main shared
//!   memory, set up at start (every version);
//! - otherwise, on PostgreSQL 17 and later, a segment of the DSM registry
//!   that the first backend needing it creates and the others attach
//!   (`dsm_registry`), unless `distlock.dynamic_shared_memory` is off.
//!
//! Without either `layout()` is None and the features fall back to their
//! table-backed paths (telemetry is then off).

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64};

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::gucs;

#[cfg(not(feature = "pg15"))]
mod dsm_registry;
pub mod lock_owners;
pub mod queue_counters;
pub mod rate_table;
pub mod claim_frontier;
pub mod runnable_log;
pub mod sleepers;

pub const SNOWFLAKE_WORKERS: usize = 1024;
pub const RATE_PARTITIONS: usize = 16;
pub const STATS_PARTITIONS: usize = 16;
/// Databases share these by their OID modulo the count: a wake-up meant for
/// another database only costs a sleeper one look at its own queue.
pub const QUEUE_WAKE_SLOTS: usize = 16;
pub(crate) const TRANCHE: &CStr = c"pg_distlock";
const SEGMENT: &CStr = c"pg_distlock shared state";

#[repr(C)]
pub struct SnowflakeSlot {
    /// (Unix milliseconds << 12) | sequence of the last ID issued.
    pub state: AtomicU64,
    /// Unix milliseconds up to which issued IDs are covered by the marks file.
    pub reserved_until: AtomicI64,
    /// Whether the persisted mark was read since the server started.
    pub loaded: AtomicBool,
    /// Set while one backend writes this worker id's mark.
    pub persisting: AtomicBool,
}

/// An entry of 0.3.0's rate-limit table, which the main state still lays
/// out (at one slot per partition) for backends running a 0.3.0 library on
/// 17+ without preload, which share this segment: since 0.4.0 rate limits
/// live in `rate_table`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct LegacyRateEntry {
    pub key: [u8; 16],
    pub in_use: bool,
    /// Until when the entry matters; after that the slot may be reused.
    pub expires_at_us: i64,
    pub window_start_us: i64,
    pub window_us: i64,
    pub count: i32,
    pub max_requests: i32,
    /// GCRA theoretical arrival time.
    pub tat_us: i64,
}

/// Telemetry of one advisory-lock key used through distlock.lock/try_lock.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct LockStatEntry {
    pub in_use: bool,
    pub database: u32,
    pub key: i64,
    pub acquisitions: i64,
    pub failed_tries: i64,
    pub timeouts: i64,
    /// Acquisitions that had to wait.
    pub waits: i64,
    pub total_wait_us: i64,
    pub max_wait_us: i64,
    /// Backends holding the key through pg_distlock right now.
    pub holders: i32,
    /// Since when `holders` has been above zero.
    pub held_since_us: i64,
    /// Last time anything happened to the key: the least recently used idle
    /// entry is the one replaced when a new key finds no free slot.
    pub last_used_us: i64,
}

/// Where consumers of one database (or of a few sharing the slot) waited for
/// jobs before 0.3.0: a backend still running such a library sleeps here,
/// and 0.3.0's commits broadcast to it while any does.
#[repr(C)]
pub struct QueueWakeSlot {
    pub cv: pg_sys::ConditionVariable,
    /// Consumers waiting now; a committing claim only wakes them when nonzero.
    pub sleepers: AtomicU32,
}

#[repr(C)]
pub struct Header {
    pub slots_per_partition: usize,
    pub stats_per_partition: usize,
}

/// Addresses of the parts of the shared state, the same in every backend
/// once set.
pub(crate) struct Layout {
    header: *mut Header,
    snowflake: *mut SnowflakeSlot,
    stats: *mut LockStatEntry,
    queue_wake: *mut QueueWakeSlot,
    locks: *mut pg_sys::LWLockPadded,
}

static mut LAYOUT: Option<Layout> = None;
/// Whether this backend has decided where its shared state lives (or that
/// it has none): decided once, so that a session never switches storage.
static mut DECIDED: bool = false;
static mut PREV_SHMEM_REQUEST_HOOK: pg_sys::shmem_request_hook_type = None;
static mut PREV_SHMEM_STARTUP_HOOK: pg_sys::shmem_startup_hook_type = None;

/// Slots per partition of the legacy rate region this library makes (see
/// `LegacyRateEntry`); a segment made by an older library keeps its own.
pub(crate) fn legacy_rate_slots() -> usize {
    1
}

pub(crate) fn stats_per_partition() -> usize {
    (gucs::LOCK_STATS_CAPACITY.get().max(0) as usize).div_ceil(STATS_PARTITIONS)
}

/// Bytes of the header, the snowflake slots, both tables and the wake slots
/// (the LWLocks come on top).
pub(crate) fn state_size(slots_per_partition: usize, stats_per_partition: usize) -> usize {
    std::mem::size_of::<Header>()
        + SNOWFLAKE_WORKERS * std::mem::size_of::<SnowflakeSlot>()
        + slots_per_partition * RATE_PARTITIONS * std::mem::size_of::<LegacyRateEntry>()
        + stats_per_partition * STATS_PARTITIONS * std::mem::size_of::<LockStatEntry>()
        + QUEUE_WAKE_SLOTS * std::mem::size_of::<QueueWakeSlot>()
}

/// The partition LWLocks: rate-limit partitions first, then telemetry.
pub(crate) const PARTITION_LOCKS: usize = RATE_PARTITIONS + STATS_PARTITIONS;

/// Lays the state out from `base`, which holds `state_size` zeroed bytes
/// when `fresh` (then the header and the condition variables are set up).
///
/// # Safety
/// `base` points to shared memory of at least `state_size` bytes for these
/// sizes, mapped at the same address for as long as the backend lives.
pub(crate) unsafe fn carve(
    base: *mut u8,
    fresh: bool,
    slots_per_partition: usize,
    stats_per_partition: usize,
    locks: *mut pg_sys::LWLockPadded,
) -> Layout {
    unsafe {
        let header = base as *mut Header;
        if fresh {
            std::ptr::write_bytes(base, 0, state_size(slots_per_partition, stats_per_partition));
            (*header).slots_per_partition = slots_per_partition;
            (*header).stats_per_partition = stats_per_partition;
        }
        let snowflake = base.add(std::mem::size_of::<Header>()) as *mut SnowflakeSlot;
        let legacy_rate = (snowflake as *mut u8).add(SNOWFLAKE_WORKERS * std::mem::size_of::<SnowflakeSlot>());
        let stats = legacy_rate
            .add((*header).slots_per_partition * RATE_PARTITIONS * std::mem::size_of::<LegacyRateEntry>())
            as *mut LockStatEntry;
        let queue_wake = (stats as *mut u8)
            .add((*header).stats_per_partition * STATS_PARTITIONS * std::mem::size_of::<LockStatEntry>())
            as *mut QueueWakeSlot;
        if fresh {
            for slot in 0..QUEUE_WAKE_SLOTS {
                pg_sys::ConditionVariableInit(std::ptr::addr_of_mut!((*queue_wake.add(slot)).cv));
            }
        }
        Layout {
            header,
            snowflake,
            stats,
            queue_wake,
            locks,
        }
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_shmem_request() {
    unsafe {
        if let Some(prev) = PREV_SHMEM_REQUEST_HOOK {
            prev();
        }
        pg_sys::RequestAddinShmemSpace(state_size(legacy_rate_slots(), stats_per_partition()));
        pg_sys::RequestAddinShmemSpace(rate_table::preload_size());
        pg_sys::RequestAddinShmemSpace(sleepers::preload_size());
        pg_sys::RequestAddinShmemSpace(runnable_log::preload_size());
        pg_sys::RequestAddinShmemSpace(claim_frontier::preload_size());
        pg_sys::RequestAddinShmemSpace(queue_counters::preload_size());
        pg_sys::RequestAddinShmemSpace(lock_owners::preload_size());
        pg_sys::RequestNamedLWLockTranche(TRANCHE.as_ptr(), PARTITION_LOCKS as i32);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_shmem_startup() {
    unsafe {
        if let Some(prev) = PREV_SHMEM_STARTUP_HOOK {
            prev();
        }
        let mut found = false;
        let (slots, stats) = (legacy_rate_slots(), stats_per_partition());
        let base = pg_sys::ShmemInitStruct(SEGMENT.as_ptr(), state_size(slots, stats), &mut found) as *mut u8;
        let locks = pg_sys::GetNamedLWLockTranche(TRANCHE.as_ptr());
        LAYOUT = Some(carve(base, !found, slots, stats, locks));
        // The rate-limit table first: it holds the server's secret, which
        // names queues in the sleepers' table and the runnable log.
        rate_table::attach_preloaded();
        sleepers::attach_preloaded();
        runnable_log::attach_preloaded();
        claim_frontier::attach_preloaded();
        queue_counters::attach_preloaded();
        lock_owners::attach_preloaded();
        DECIDED = true;
    }
}

/// Installs the shared-memory hooks; only effective during preload.
pub fn init() {
    unsafe {
        if !pg_sys::process_shared_preload_libraries_in_progress {
            return;
        }
        PREV_SHMEM_REQUEST_HOOK = pg_sys::shmem_request_hook;
        pg_sys::shmem_request_hook = Some(on_shmem_request);
        PREV_SHMEM_STARTUP_HOOK = pg_sys::shmem_startup_hook;
        pg_sys::shmem_startup_hook = Some(on_shmem_startup);
    }
}

fn layout() -> Option<&'static Layout> {
    unsafe {
        if !DECIDED {
            decide();
        }
        (*std::ptr::addr_of!(LAYOUT)).as_ref()
    }
}

/// Without preload: the DSM registry's segment on 17+, when allowed. Only
/// inside a transaction, where an error (out of memory) is an ordinary
/// ERROR; a backend first asking from a commit or exit callback has nothing
/// of its own there and goes without.
unsafe fn decide() {
    unsafe {
        if !pg_sys::IsTransactionState() {
            return;
        }
        DECIDED = true;
        #[cfg(not(feature = "pg15"))]
        if gucs::DYNAMIC_SHARED_MEMORY.get() {
            LAYOUT = Some(dsm_registry::attach());
            // The rate-limit table first: it holds the server's secret, which
            // names queues in the sleepers' table and the runnable log, so a
            // backend that fails to attach it has no sleepers either (and
            // never names a queue with another key).
            rate_table::attach_registry();
            sleepers::attach_registry();
            runnable_log::attach_registry();
            claim_frontier::attach_registry();
            queue_counters::attach_registry();
            lock_owners::attach_registry();
        }
    }
}

/// Whether shared memory is available: pg_distlock was preloaded, or on
/// 17+ the DSM registry serves it.
pub fn available() -> bool {
    layout().is_some()
}

/// The server's secret, drawn when its shared state was made (kept with
/// the rate-limit table): keys the hashes of names that any caller chooses
/// and that share server-wide tables (rate-limit keys, queue names). None
/// without shared memory.
pub fn server_secret() -> Option<[u64; 2]> {
    rate_table::secret()
}

/// The snowflake slot of `worker_id` (0..1024).
pub fn snowflake_slot(worker_id: usize) -> Option<&'static SnowflakeSlot> {
    let layout = layout()?;
    (worker_id < SNOWFLAKE_WORKERS).then(|| unsafe { &*layout.snowflake.add(worker_id) })
}

/// The queue wake slot of `database`; None without shared memory.
pub fn queue_wake_slot(database: pg_sys::Oid) -> Option<&'static QueueWakeSlot> {
    let layout = layout()?;
    Some(unsafe { &*layout.queue_wake.add(database.to_u32() as usize % QUEUE_WAKE_SLOTS) })
}

/// Runs `f` on `entries` while holding lock number `lock` exclusively.
unsafe fn with_locked<T, R>(
    layout: &Layout,
    lock: usize,
    entries: &mut [T],
    f: impl FnOnce(&mut [T]) -> R,
) -> R {
    unsafe { holding_exclusive(std::ptr::addr_of_mut!((*layout.locks.add(lock)).lock), || f(entries)) }
}

/// Runs `f` while holding `lock` exclusively (released however `f` ends).
///
/// # Safety
/// `lock` is an initialised LWLock in shared memory.
pub(crate) unsafe fn holding_exclusive<R>(lock: *mut pg_sys::LWLock, f: impl FnOnce() -> R) -> R {
    unsafe {
        pg_sys::LWLockAcquire(lock, pg_sys::LWLockMode::LW_EXCLUSIVE);
        struct Release(*mut pg_sys::LWLock);
        impl Drop for Release {
            fn drop(&mut self) {
                unsafe { pg_sys::LWLockRelease(self.0) };
            }
        }
        let _release = Release(lock);
        f()
    }
}

/// Runs `f` while holding rate-limit partition `partition`'s LWLock
/// exclusively (the partitions themselves are in `rate_table`).
pub(crate) fn with_rate_lock<R>(partition: usize, f: impl FnOnce() -> R) -> Option<R> {
    let layout = layout()?;
    Some(unsafe { with_locked(layout, partition % RATE_PARTITIONS, &mut [0u8; 0], |_| f()) })
}

/// How many lock-telemetry partitions hold entries (0 when telemetry is
/// off or pg_distlock was not preloaded).
pub fn stats_partitions() -> usize {
    match layout() {
        Some(layout) if unsafe { (*layout.header).stats_per_partition } > 0 => STATS_PARTITIONS,
        _ => 0,
    }
}

/// Runs `f` on telemetry partition `partition` under its exclusive LWLock;
/// None when telemetry is off.
pub fn with_stats_partition<R>(
    partition: usize,
    f: impl FnOnce(&mut [LockStatEntry]) -> R,
) -> Option<R> {
    let layout = layout()?;
    unsafe {
        let per = (*layout.header).stats_per_partition;
        if per == 0 {
            return None;
        }
        let partition = partition % STATS_PARTITIONS;
        let entries = std::slice::from_raw_parts_mut(layout.stats.add(partition * per), per);
        Some(with_locked(layout, RATE_PARTITIONS + partition, entries, f))
    }
}
