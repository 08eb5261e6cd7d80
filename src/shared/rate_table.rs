//! The shared-memory rate-limit table (since 0.4.0): 16 partitions of
//! `distlock.rate_limit_capacity / 16` entries, placed by a hash keyed with
//! a secret drawn when the table is made, so that nobody can compute keys
//! that crowd one chosen key's place (issue 44, item 3). A table of its own
//! beside the main shared state, whose layout (and its 0.3.0 rate region,
//! now sized to the minimum) stays as older libraries expect: in the
//! server's shared memory when preloaded, else DSM registry segments.
//!
//! The partitions use the main state's first `RATE_PARTITIONS` LWLocks.

use std::ffi::CStr;

use pgrx::pg_sys;

use super::RATE_PARTITIONS;

/// Bytes of a key kept for listing; longer keys are kept cut (at a
/// character boundary) and marked incomplete.
pub const KEPT_KEY_BYTES: usize = 64;

const SHMEM_NAME: &CStr = c"pg_distlock rate limits v2";
#[cfg(not(feature = "pg15"))]
const SIZES_SEGMENT: &CStr = c"pg_distlock rate limit sizes v2";
#[cfg(not(feature = "pg15"))]
const SEGMENT_NAME: &CStr = c"pg_distlock rate limits v2";

/// One key's state. Bump the names above when this changes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RateEntry {
    /// The keyed hash of (kind, database, key); compared to find a key.
    pub hash: [u8; 16],
    pub in_use: bool,
    /// 1 fixed window, 2 GCRA.
    pub kind: u8,
    /// Length of the whole key in bytes (more than `key_text` holds when cut).
    pub key_len: u16,
    pub database: u32,
    /// Until when the entry matters; after that the slot may be reused.
    pub expires_at_us: i64,
    pub window_start_us: i64,
    pub window_us: i64,
    pub count: i32,
    pub max_requests: i32,
    /// GCRA theoretical arrival time.
    pub tat_us: i64,
    pub kept_len: u16,
    pub key_text: [u8; KEPT_KEY_BYTES],
}

impl Default for RateEntry {
    fn default() -> Self {
        // All zero is a free entry.
        unsafe { std::mem::zeroed() }
    }
}

impl RateEntry {
    pub fn kept_key(&self) -> &[u8] {
        &self.key_text[..(self.kept_len as usize).min(KEPT_KEY_BYTES)]
    }

    pub fn key_complete(&self) -> bool {
        self.kept_len == self.key_len
    }
}

/// How many entries of a partition one database holds (0: counter free).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct DatabaseCount {
    pub database: u32,
    pub entries: u32,
}

/// Databases whose entries a partition counts as it goes; a database
/// beyond them is counted by reading the partition when it matters.
pub const COUNTED_DATABASES: usize = 8;

/// Bookkeeping of one partition, under its LWLock.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct PartitionState {
    /// Entries in use (live or expired but not yet freed).
    pub in_use: u32,
    /// The farthest any entry in use lies from its home slot: a lookup
    /// looks that far and no farther (free slots do not end a lookup, so
    /// that expired entries can be freed anywhere).
    pub max_probe: u32,
    pub databases: [DatabaseCount; COUNTED_DATABASES],
    /// When `reclaim` last ran: a long `max_probe` left by keys that have
    /// since expired is shortened at most once a second.
    pub reclaimed_at_us: i64,
}

#[repr(C)]
pub struct RateTable {
    /// SipHash keys, drawn when the table was made.
    pub secret: [u64; 2],
    pub slots_per_partition: usize,
    pub partitions: [PartitionState; RATE_PARTITIONS],
    pub entries: [RateEntry; 0],
}

static mut TABLE: *mut RateTable = std::ptr::null_mut();

pub(crate) fn slots_per_partition() -> usize {
    (crate::gucs::RATE_LIMIT_CAPACITY.get().max(16) as usize).div_ceil(RATE_PARTITIONS)
}

fn size(slots_per_partition: usize) -> usize {
    std::mem::size_of::<RateTable>() + slots_per_partition * RATE_PARTITIONS * std::mem::size_of::<RateEntry>()
}

/// Zeroes the table and draws its secret.
unsafe fn initialize(table: *mut RateTable, slots_per_partition: usize) {
    unsafe {
        std::ptr::write_bytes(table.cast::<u8>(), 0, size(slots_per_partition));
        (*table).slots_per_partition = slots_per_partition;
        let secret = std::ptr::addr_of_mut!((*table).secret);
        if !pg_sys::pg_strong_random(secret.cast(), std::mem::size_of::<[u64; 2]>()) {
            pgrx::error!("pg_distlock could not draw the rate-limit table's secret");
        }
    }
}

/// The space to request at preload.
pub(crate) fn preload_size() -> usize {
    size(slots_per_partition())
}

/// From shmem_startup_hook.
pub(crate) unsafe fn attach_preloaded() {
    unsafe {
        let mut found = false;
        let slots = slots_per_partition();
        let table = pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), size(slots), &mut found).cast::<RateTable>();
        if !found {
            initialize(table, slots);
        }
        TABLE = table;
    }
}

#[cfg(not(feature = "pg15"))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn init_sizes(ptr: *mut std::ffi::c_void) {
    unsafe { ptr.cast::<usize>().write(slots_per_partition()) }
}

#[cfg(not(feature = "pg15"))]
static mut CREATING: usize = 0;

#[cfg(not(feature = "pg15"))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn init_segment(ptr: *mut std::ffi::c_void) {
    unsafe { initialize(ptr.cast::<RateTable>(), CREATING) }
}

/// Without preload (17+): the registry's segments, sized by the first
/// backend (the registry refuses a segment asked for with another size).
#[cfg(not(feature = "pg15"))]
pub(crate) unsafe fn attach_registry() {
    unsafe {
        let mut found = false;
        let slots = *pg_sys::GetNamedDSMSegment(
            SIZES_SEGMENT.as_ptr(),
            std::mem::size_of::<usize>(),
            Some(init_sizes),
            &mut found,
        )
        .cast::<usize>();
        CREATING = slots;
        TABLE = pg_sys::GetNamedDSMSegment(SEGMENT_NAME.as_ptr(), size(slots), Some(init_segment), &mut found)
            .cast::<RateTable>();
    }
}

/// The table, once this backend has decided its shared state has one.
fn table() -> Option<*mut RateTable> {
    super::available();
    let table = unsafe { TABLE };
    (!table.is_null()).then_some(table)
}

/// The table's secret; None without shared memory.
pub fn secret() -> Option<[u64; 2]> {
    table().map(|t| unsafe { (*t).secret })
}

/// Runs `f` on partition `partition` (its state and entries) under its
/// exclusive LWLock; None without shared memory.
pub fn with_partition<R>(partition: usize, f: impl FnOnce(&mut PartitionState, &mut [RateEntry]) -> R) -> Option<R> {
    let table = table()?;
    let partition = partition % RATE_PARTITIONS;
    super::with_rate_lock(partition, || unsafe {
        let per = (*table).slots_per_partition;
        let state = &mut *std::ptr::addr_of_mut!((*table).partitions[partition]);
        let base = std::ptr::addr_of_mut!((*table).entries).cast::<RateEntry>();
        let entries = std::slice::from_raw_parts_mut(base.add(partition * per), per);
        f(state, entries)
    })
}
