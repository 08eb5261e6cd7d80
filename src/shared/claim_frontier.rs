//! The furthest place in the claim's index that a claim of each queue (or
//! of every queue) reached, with the runnable log's position read before
//! that claim's snapshot: a backend whose own place fell behind (its last
//! claim was slow, or it was idle) starts where the others got to, rather
//! than stepping over every job they claimed since (queue/claim_start.rs;
//! docs/design/queue-storage.md). A table of fixed size beside the
//! runnable log: in the server's shared memory when preloaded, else a DSM
//! registry segment.
//!
//! A slot holds one (database, queue) at a time, found by its exact key
//! (a keyed 64-bit hash of the queue's name: another queue's frontier
//! would skip this one's jobs); a key whose slot holds another is simply
//! not remembered. Each slot is a seqlock whose writers take it by
//! compare-and-swap and give up when another writer has it: publishing is
//! an optimisation that may be skipped, reading one must be consistent.

use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64};

use pgrx::pg_sys;

use super::runnable_log::{Key, ENTRIES};
use super::sleepers::ORDER;

/// Slots: a database's queues with consumers, hashed.
pub const SLOTS: usize = 512;

const SHMEM_NAME: &CStr = c"pg_distlock claim frontier";
#[cfg(not(feature = "pg15"))]
const SEGMENT_NAME: &CStr = c"pg_distlock claim frontier v1";

#[repr(C)]
struct Slot {
    /// Even when the slot can be read, odd while it is written; 0: never
    /// written.
    version: AtomicU64,
    database: AtomicU32,
    /// The queue's keyed hash; 0 for claims of every queue.
    queue: AtomicU64,
    priority: AtomicI32,
    run_after: AtomicI64,
    id: AtomicI64,
    /// The runnable log's position read before the claim's snapshot.
    position: AtomicU64,
}

#[repr(C)]
pub struct ClaimFrontier {
    slots: [Slot; SLOTS],
}

/// A place the claims of one (database, queue) reached, and the runnable
/// log's position that vouches for what lies before it.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Frontier {
    pub key: Key,
    pub position: u64,
}

fn slot_of(database: u32, queue: u64) -> usize {
    let mixed = queue ^ (database as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    (mixed.wrapping_mul(0xff51_afd7_ed55_8ccd) >> 32) as usize % SLOTS
}

/// `a` later than `b` in the claim's index (priority descending, then
/// run_after, then id), as queue::place::Place orders them.
fn later(a: Key, b: Key) -> bool {
    (std::cmp::Reverse(a.0), a.1, a.2) > (std::cmp::Reverse(b.0), b.1, b.2)
}

impl ClaimFrontier {
    /// What the slot of (`database`, `queue`) holds for them, if anything.
    pub fn read(&self, database: u32, queue: u64) -> Option<Frontier> {
        let slot = &self.slots[slot_of(database, queue)];
        let version = slot.version.load(ORDER);
        if version == 0 || version % 2 == 1 {
            return None;
        }
        let (slot_database, slot_queue) = (slot.database.load(ORDER), slot.queue.load(ORDER));
        let key = (slot.priority.load(ORDER), slot.run_after.load(ORDER), slot.id.load(ORDER));
        let position = slot.position.load(ORDER);
        if slot.version.load(ORDER) != version || slot_database != database || slot_queue != queue {
            return None;
        }
        Some(Frontier { key, position })
    }

    /// Publishes that a claim of (`database`, `queue`) whose start was
    /// vouched by the log at `position` reached `key`. Kept when it is
    /// further than what the slot holds for them, or when what it holds
    /// is of another key or so old that the log no longer reaches back to
    /// its position (it would be of no use, and never replaced).
    pub fn publish(&self, database: u32, queue: u64, key: Key, position: u64) {
        let slot = &self.slots[slot_of(database, queue)];
        let version = slot.version.load(ORDER);
        if version % 2 == 1 {
            return;
        }
        if version != 0 && slot.database.load(ORDER) == database && slot.queue.load(ORDER) == queue {
            let held = (slot.priority.load(ORDER), slot.run_after.load(ORDER), slot.id.load(ORDER));
            let held_position = slot.position.load(ORDER);
            let stale = position.saturating_sub(held_position) > ENTRIES as u64 / 2;
            if !later(key, held) && !stale {
                return;
            }
        }
        if slot.version.compare_exchange(version, version + 1, ORDER, ORDER).is_err() {
            return;
        }
        slot.database.store(database, ORDER);
        slot.queue.store(queue, ORDER);
        slot.priority.store(key.0, ORDER);
        slot.run_after.store(key.1, ORDER);
        slot.id.store(key.2, ORDER);
        slot.position.store(position, ORDER);
        slot.version.store(version + 2, ORDER);
    }
}

static mut FRONTIER: *const ClaimFrontier = std::ptr::null();

fn size() -> usize {
    std::mem::size_of::<ClaimFrontier>()
}

/// The space to request at preload.
pub(crate) fn preload_size() -> usize {
    size()
}

/// From shmem_startup_hook.
pub(crate) unsafe fn attach_preloaded() {
    unsafe {
        let mut found = false;
        let frontier = pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), size(), &mut found).cast::<ClaimFrontier>();
        if !found {
            std::ptr::write_bytes(frontier.cast::<u8>(), 0, size());
        }
        FRONTIER = frontier;
    }
}

#[cfg(not(feature = "pg15"))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn init_segment(ptr: *mut std::ffi::c_void) {
    unsafe { std::ptr::write_bytes(ptr.cast::<u8>(), 0, size()) }
}

/// Without preload (17+): the registry's segment.
#[cfg(not(feature = "pg15"))]
pub(crate) unsafe fn attach_registry() {
    unsafe {
        let mut found = false;
        FRONTIER = pg_sys::GetNamedDSMSegment(SEGMENT_NAME.as_ptr(), size(), Some(init_segment), &mut found)
            .cast::<ClaimFrontier>();
    }
}

/// The table, once this backend has decided its shared state has one.
pub fn frontier() -> Option<&'static ClaimFrontier> {
    super::available();
    unsafe { FRONTIER.as_ref() }
}
