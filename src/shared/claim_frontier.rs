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
//!
//! COMMIT and ROLLBACK PREPARED make jobs runnable (a prepared enqueue, a
//! prepared claim given back) in a session that runs none of our hooks, so
//! no runnable log entry tells of them; a frontier published past them
//! would make every backend step over them (review helper-78). So a PREPARE
//! of a transaction that changed the queue records its transaction id here
//! and moves the epoch on: a frontier published under an older epoch is
//! not used, and a claim that began while such a transaction was still
//! prepared publishes none. Once it is neither in progress nor prepared,
//! claims that begin after see its outcome and may publish again. The
//! table starts empty (a server start, a crash restart, a promoted standby)
//! while prepared transactions survive: until the first claim of a database
//! has recorded those of its own that hold a lock on the queue's table
//! (pg_prepared_xacts, pg_locks), nothing of that database is published.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64};

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
    /// The prepared-transaction epoch when the claim began.
    epoch: AtomicU64,
}

/// Transactions that changed the queue and were prepared, remembered at
/// once: more than this at a time turn the frontier off until a restart.
pub const PREPARED_SLOTS: usize = 64;

/// Databases that publish: one beyond these publishes nothing.
pub const KNOWN_DATABASES: usize = 64;

#[repr(C)]
pub struct ClaimFrontier {
    /// Moved on by each PREPARE of a transaction that changed the queue.
    epoch: AtomicU64,
    /// Their transaction ids while they may be prepared (0: a free slot).
    prepared: [AtomicU32; PREPARED_SLOTS],
    /// How many of `prepared` are taken: the claims' fast path reads this.
    prepared_count: AtomicU32,
    /// A PREPARE found no free slot: no frontier is used from then on.
    overflowed: AtomicBool,
    /// The databases whose prepared transactions that existed when the
    /// table was made have been recorded (see `learn_prepared`); 0: free.
    known: [AtomicU32; KNOWN_DATABASES],
    slots: [Slot; SLOTS],
}

/// A place the claims of one (database, queue) reached, and the runnable
/// log's position that vouches for what lies before it.
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Frontier {
    pub key: Key,
    pub position: u64,
    /// The prepared-transaction epoch it was published in (the current one).
    pub epoch: u64,
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
    /// The epoch a claim beginning now publishes under, read before its
    /// snapshot; None while a transaction that changed the queue may still
    /// be prepared (its outcome will make jobs runnable that no log entry
    /// tells of), or after the table of them overflowed. The epoch is read
    /// before the table, and a PREPARE records its id before it moves the
    /// epoch on, so a claim either sees the id or publishes under an epoch
    /// that the PREPARE makes old.
    pub fn publishable_epoch(&self, database: u32) -> Option<u64> {
        let epoch = self.epoch.load(ORDER);
        if self.overflowed.load(ORDER) || !self.knows(database) {
            return None;
        }
        if self.prepared_count.load(ORDER) == 0 {
            return Some(epoch);
        }
        for slot in &self.prepared {
            let xid = slot.load(ORDER);
            if xid == 0 {
                continue;
            }
            // A prepared transaction stays in progress until COMMIT or
            // ROLLBACK PREPARED; after that its outcome is in every new
            // snapshot, this claim's included.
            if unsafe { pg_sys::TransactionIdIsInProgress(xid.into()) } {
                return None;
            }
            if slot.compare_exchange(xid, 0, ORDER, ORDER).is_ok() {
                self.prepared_count.fetch_sub(1, ORDER);
            }
        }
        Some(epoch)
    }

    /// A transaction that changed the queue is being prepared (its id
    /// `xid`): see the module's comment.
    pub fn prepared(&self, xid: pg_sys::TransactionId) {
        self.record(xid.into_inner());
        self.epoch.fetch_add(1, ORDER);
    }

    fn record(&self, xid: u32) {
        let recorded = xid != 0
            && self.prepared.iter().any(|slot| slot.compare_exchange(0, xid, ORDER, ORDER).is_ok());
        if recorded {
            self.prepared_count.fetch_add(1, ORDER);
        } else {
            self.overflowed.store(true, ORDER);
        }
    }

    fn knows(&self, database: u32) -> bool {
        // Once known, known for this backend's life: the table is made anew
        // only with the server's shared memory, which no backend outlives.
        // (Spares every claim the scan of the list.)
        thread_local! {
            static KNOWN_HERE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
        }
        if database != 0 && KNOWN_HERE.with(std::cell::Cell::get) == database {
            return true;
        }
        let known = self.known.iter().any(|known| known.load(ORDER) == database);
        if known {
            KNOWN_HERE.with(|here| here.set(database));
        }
        known
    }

    /// Once per database after the table is made: records the prepared
    /// transactions of `database` that may have changed its queue
    /// (`existing`, called only if the server allows them; a PREPARE from
    /// now on records itself), then lets its claims publish. Another backend
    /// doing the same at once records some twice, which costs a slot each.
    pub fn learn_prepared(&self, database: u32, allowed: bool, existing: impl FnOnce() -> Vec<u32>) {
        if database == 0 || self.knows(database) {
            return;
        }
        if allowed {
            for xid in existing() {
                self.record(xid);
            }
        }
        self.epoch.fetch_add(1, ORDER);
        // No free entry: this database never publishes (until a restart).
        let _ = self.known.iter().any(|known| known.compare_exchange(0, database, ORDER, ORDER).is_ok());
    }

    /// What the slot of (`database`, `queue`) holds for them, if anything
    /// usable.
    pub fn read(&self, database: u32, queue: u64) -> Option<Frontier> {
        let slot = &self.slots[slot_of(database, queue)];
        let version = slot.version.load(ORDER);
        if version == 0 || version % 2 == 1 {
            return None;
        }
        let (slot_database, slot_queue) = (slot.database.load(ORDER), slot.queue.load(ORDER));
        let key = (slot.priority.load(ORDER), slot.run_after.load(ORDER), slot.id.load(ORDER));
        let position = slot.position.load(ORDER);
        let epoch = slot.epoch.load(ORDER);
        if slot.version.load(ORDER) != version || slot_database != database || slot_queue != queue {
            return None;
        }
        if epoch != self.epoch.load(ORDER) || self.overflowed.load(ORDER) {
            return None;
        }
        Some(Frontier { key, position, epoch })
    }

    /// Publishes that a claim of (`database`, `queue`) whose start was
    /// vouched by the log at `position` reached `key`, the claim having
    /// begun in `epoch` (see `publishable_epoch`). Kept when it is further
    /// than what the slot holds for them, or when what it holds is of
    /// another key or epoch, or so old that the log no longer reaches back
    /// to its position (it would be of no use, and never replaced).
    pub fn publish(&self, database: u32, queue: u64, key: Key, position: u64, epoch: u64) {
        // A PREPARE since the claim began: of no use to anyone.
        if epoch != self.epoch.load(ORDER) {
            return;
        }
        let slot = &self.slots[slot_of(database, queue)];
        let version = slot.version.load(ORDER);
        if version % 2 == 1 {
            return;
        }
        if version != 0 && slot.database.load(ORDER) == database && slot.queue.load(ORDER) == queue {
            let held = (slot.priority.load(ORDER), slot.run_after.load(ORDER), slot.id.load(ORDER));
            let held_position = slot.position.load(ORDER);
            let stale = position.saturating_sub(held_position) > ENTRIES as u64 / 2
                || slot.epoch.load(ORDER) != epoch;
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
        slot.epoch.store(epoch, ORDER);
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
