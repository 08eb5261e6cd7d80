//! Cumulative per-queue job counters (issue 47, item 3): per database and
//! queue, jobs claimed, completed, failed (to be retried), dead, taken over
//! from an expired lease and put back after one, and a histogram of how
//! long claimed jobs waited. Only ever added to, at commit
//! (queue/counters.rs), or zeroed by an admin. A table of its own beside
//! the main shared state: in the server's shared memory when preloaded,
//! else a DSM registry segment (17+), each with its partition LWLocks inside.
//!
//! Entries are found by a SipHash of (database, queue name) keyed with the
//! server's secret, so nobody can pick queue names that crowd another's
//! place. An entry is never freed, only zeroed (reset) or replaced (the
//! least recently used one among those a lookup probes, when a new queue
//! finds no free slot): a free slot therefore ends a lookup.

use std::ffi::CStr;

use pgrx::pg_sys;

/// Upper bounds, in seconds, of the wait histogram's buckets (a last one,
/// +Inf, follows): those of the last-hour view `queue_wait_histogram`.
pub const WAIT_BOUNDS: [f64; 16] =
    [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];
pub const BUCKETS: usize = WAIT_BOUNDS.len() + 1;
pub const PARTITIONS: usize = 16;
/// Bytes of a queue's name kept for listing; longer names are kept cut at
/// a character boundary of the database encoding (`kept_len` < `name_len`).
pub const KEPT_NAME_BYTES: usize = 128;
/// How many slots a lookup inspects.
const MAX_PROBE: usize = 32;

const TRANCHE: &CStr = c"pg_distlock queue counters";
const SHMEM_NAME: &CStr = c"pg_distlock queue counters v1";
#[cfg(not(feature = "pg15"))]
const SIZES_SEGMENT: &CStr = c"pg_distlock queue counter sizes v1";
#[cfg(not(feature = "pg15"))]
const SEGMENT_NAME: &CStr = c"pg_distlock queue counters v1";

/// What happened to jobs, counted per queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Outcome {
    Claimed = 0,
    Completed,
    /// Failed by its consumer, to be retried.
    Failed,
    /// Out of attempts: failed, or its lease ran out, with none left.
    Dead,
    /// A claim took the job over from an expired lease (also counted as claimed).
    TakenOver,
    /// Its lease ran out and the sweep (or a limited queue's claim) put it back.
    Expired,
}

pub const OUTCOMES: usize = 6;

/// Counts to add to one queue's entry.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Delta {
    pub outcomes: [u64; OUTCOMES],
    /// Non-cumulative: jobs whose wait fell in each bucket.
    pub waits: [u64; BUCKETS],
    pub wait_sum_us: u64,
}

impl Delta {
    pub fn add(&mut self, other: &Delta) {
        for (a, b) in self.outcomes.iter_mut().zip(other.outcomes) {
            *a = a.saturating_add(b);
        }
        for (a, b) in self.waits.iter_mut().zip(other.waits) {
            *a = a.saturating_add(b);
        }
        self.wait_sum_us = self.wait_sum_us.saturating_add(other.wait_sum_us);
    }

    /// Records one wait of `wait_us` microseconds (negative counts as 0).
    pub fn wait(&mut self, wait_us: i64) {
        let wait_us = wait_us.max(0);
        let seconds = wait_us as f64 / 1e6;
        let bucket = WAIT_BOUNDS.iter().position(|&le| seconds <= le).unwrap_or(WAIT_BOUNDS.len());
        self.waits[bucket] += 1;
        self.wait_sum_us = self.wait_sum_us.saturating_add(wait_us as u64);
    }
}

/// One queue of one database. Bump the names above when this changes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Entry {
    pub in_use: bool,
    pub database: u32,
    /// The keyed hash of (database, queue name).
    pub hash: u64,
    /// Length of the whole name in bytes.
    pub name_len: u32,
    pub kept_len: u32,
    pub name: [u8; KEPT_NAME_BYTES],
    pub counts: Delta,
    /// When counting for the queue began (since the server started, the
    /// entry was taken, or it was reset).
    pub since_us: i64,
    pub last_used_us: i64,
}

impl Entry {
    pub fn kept_name(&self) -> &[u8] {
        &self.name[..(self.kept_len as usize).min(KEPT_NAME_BYTES)]
    }

    pub fn name_complete(&self) -> bool {
        self.kept_len == self.name_len
    }
}

#[repr(C)]
struct Table {
    per_partition: usize,
    tranche_id: i32,
    locks: [pg_sys::LWLockPadded; PARTITIONS],
    entries: [Entry; 0],
}

static mut TABLE: *mut Table = std::ptr::null_mut();

pub(crate) fn per_partition() -> usize {
    (crate::gucs::QUEUE_COUNTERS_CAPACITY.get().max(0) as usize).div_ceil(PARTITIONS)
}

fn size(per_partition: usize) -> usize {
    std::mem::size_of::<Table>() + per_partition * PARTITIONS * std::mem::size_of::<Entry>()
}

unsafe fn initialize(table: *mut Table, per_partition: usize) {
    unsafe {
        std::ptr::write_bytes(table.cast::<u8>(), 0, size(per_partition));
        (*table).per_partition = per_partition;
        (*table).tranche_id = pg_sys::LWLockNewTrancheId();
        for lock in 0..PARTITIONS {
            pg_sys::LWLockInitialize(std::ptr::addr_of_mut!((*table).locks[lock].lock), (*table).tranche_id);
        }
    }
}

/// Names the partition locks' wait events in this backend.
unsafe fn register_tranche(table: *mut Table) {
    unsafe { pg_sys::LWLockRegisterTranche((*table).tranche_id, TRANCHE.as_ptr()) }
}

/// The space to request at preload.
pub(crate) fn preload_size() -> usize {
    size(per_partition())
}

/// From shmem_startup_hook.
pub(crate) unsafe fn attach_preloaded() {
    unsafe {
        let mut found = false;
        let per = per_partition();
        let table = pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), size(per), &mut found).cast::<Table>();
        if !found {
            initialize(table, per);
        }
        register_tranche(table);
        TABLE = table;
    }
}

#[cfg(not(feature = "pg15"))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn init_sizes(ptr: *mut std::ffi::c_void) {
    unsafe { ptr.cast::<usize>().write(per_partition()) }
}

#[cfg(not(feature = "pg15"))]
static mut CREATING: usize = 0;

#[cfg(not(feature = "pg15"))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn init_segment(ptr: *mut std::ffi::c_void) {
    unsafe { initialize(ptr.cast::<Table>(), CREATING) }
}

/// Without preload (17+): the registry's segments, sized by the first backend.
#[cfg(not(feature = "pg15"))]
pub(crate) unsafe fn attach_registry() {
    unsafe {
        let mut found = false;
        let per = *pg_sys::GetNamedDSMSegment(
            SIZES_SEGMENT.as_ptr(),
            std::mem::size_of::<usize>(),
            Some(init_sizes),
            &mut found,
        )
        .cast::<usize>();
        CREATING = per;
        let table =
            pg_sys::GetNamedDSMSegment(SEGMENT_NAME.as_ptr(), size(per), Some(init_segment), &mut found).cast::<Table>();
        register_tranche(table);
        TABLE = table;
    }
}

/// The table, once this backend has decided its shared state has one, and
/// when it has room (capacity 0 turns counting off).
fn table() -> Option<*mut Table> {
    super::available();
    let table = unsafe { TABLE };
    (!table.is_null() && unsafe { (*table).per_partition } > 0).then_some(table)
}

/// Whether counters are kept: shared memory with a nonzero capacity.
pub fn available() -> bool {
    table().is_some()
}

/// Like [`available`], without deciding where shared state lives (safe
/// in commit callbacks, where that cannot be decided).
pub(crate) fn attached() -> bool {
    let table = unsafe { TABLE };
    !table.is_null() && unsafe { (*table).per_partition } > 0
}

/// Runs `f` on partition `partition` of `table` under its exclusive LWLock.
fn with_partition<R>(table: *mut Table, partition: usize, f: impl FnOnce(&mut [Entry]) -> R) -> R {
    unsafe {
        let partition = partition % PARTITIONS;
        let per = (*table).per_partition;
        let base = std::ptr::addr_of_mut!((*table).entries).cast::<Entry>();
        let entries = std::slice::from_raw_parts_mut(base.add(partition * per), per);
        super::holding_exclusive(std::ptr::addr_of_mut!((*table).locks[partition].lock), || f(entries))
    }
}

/// The slot of (database, hash), or a slot it may take: a never-used one,
/// or else the least recently used among those probed.
fn probe(entries: &[Entry], start: usize, database: u32, hash: u64) -> (usize, bool) {
    let len = entries.len();
    let mut victim = start % len;
    for step in 0..MAX_PROBE.min(len) {
        let i = (start + step) % len;
        let entry = &entries[i];
        if !entry.in_use {
            return (i, false);
        }
        if entry.database == database && entry.hash == hash {
            return (i, true);
        }
        if entries[victim].last_used_us > entry.last_used_us {
            victim = i;
        }
    }
    (victim, false)
}

/// Adds `delta` to the entry of (`database`, queue `name` with keyed hash
/// `hash`) at `now_us`, taking a slot for it when it has none, which keeps
/// the first `kept` bytes of the name (at most `KEPT_NAME_BYTES`, ending on
/// a character boundary of the database encoding). Does not fail (it runs
/// after commit).
pub(crate) fn add(database: u32, hash: u64, name: &[u8], kept: usize, delta: &Delta, now_us: i64) {
    if !attached() {
        return;
    }
    let table = unsafe { TABLE };
    with_partition(table, (hash % PARTITIONS as u64) as usize, |entries| {
        let start = ((hash / PARTITIONS as u64) % entries.len() as u64) as usize;
        let (i, found) = probe(entries, start, database, hash);
        let entry = &mut entries[i];
        if !found {
            let kept = &name[..kept.min(KEPT_NAME_BYTES).min(name.len())];
            let mut fresh = Entry {
                in_use: true,
                database,
                hash,
                name_len: name.len() as u32,
                kept_len: kept.len() as u32,
                name: [0; KEPT_NAME_BYTES],
                counts: Delta::default(),
                since_us: now_us,
                last_used_us: now_us,
            };
            fresh.name[..kept.len()].copy_from_slice(kept);
            *entry = fresh;
        }
        entry.counts.add(delta);
        entry.last_used_us = now_us;
    });
}

/// Copies of the entries of `database`; None without a table.
pub fn entries_of(database: u32) -> Option<Vec<Entry>> {
    let table = table()?;
    let mut found = Vec::new();
    for partition in 0..PARTITIONS {
        with_partition(table, partition, |entries| {
            found.extend(entries.iter().filter(|e| e.in_use && e.database == database).copied());
        });
    }
    Some(found)
}

/// Zeroes the counts of the entries of `database` for which `which` says
/// so (their names and places stay); how many. None without a table.
pub fn reset(database: u32, now_us: i64, mut which: impl FnMut(&Entry) -> bool) -> Option<i64> {
    let table = table()?;
    let mut reset = 0;
    for partition in 0..PARTITIONS {
        with_partition(table, partition, |entries| {
            for entry in entries.iter_mut().filter(|e| e.in_use && e.database == database) {
                if which(entry) {
                    entry.counts = Delta::default();
                    entry.since_us = now_us;
                    reset += 1;
                }
            }
        });
    }
    Some(reset)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_fall_into_their_buckets() {
        let mut d = Delta::default();
        d.wait(0);
        d.wait(5_000); // exactly 0.005 s: le is inclusive
        d.wait(5_001);
        d.wait(-3);
        d.wait(7_200_000_000);
        assert_eq!(d.waits[0], 3);
        assert_eq!(d.waits[1], 1);
        assert_eq!(d.waits[BUCKETS - 1], 1);
        assert_eq!(d.wait_sum_us, 7_200_010_001);
    }
}
