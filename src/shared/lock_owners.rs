//! Who owns each backend's pg_distlock locks, what it holds and what it
//! waits for: one entry per PGPROC (indexed like the server's own process
//! array), so that a waiter can find a deadlock that runs through several
//! connections of one client (its owner, `distlock.owner`), which the
//! server's own detector, seeing only backends, never finds.
//!
//! Every field is an atomic written only by the entry's backend. Readers
//! (another backend's wait check, in a timeout handler) read without locks
//! and may see an entry mid-change: what they find is only a suspicion,
//! which the waiter verifies against the lock manager before it acts
//! (locks/owner_wait.rs). A table of its own beside the main shared state:
//! in the server's shared memory when preloaded, else a DSM registry segment.

use std::ffi::CStr;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering,
};

use pgrx::pg_sys;

/// Locks one connection's entry lists; a connection holding more (an
/// unusual client: each of the Python client's locks has a connection of
/// its own) has its later ones unseen by the check (`overflowed`).
pub const HELD_PER_BACKEND: usize = 16;
/// Bytes of an owner's name kept for the views (longer names are cut; the
/// keyed hash tells owners apart). The Python client's owners (worker id,
/// host:pid:token, thread) fit with room to spare.
pub const OWNER_BYTES: usize = 256;

const SHMEM_NAME: &CStr = c"pg_distlock lock owners";
#[cfg(not(feature = "pg15"))]
const SEGMENT_NAME: &CStr = c"pg_distlock lock owners v2";

pub const ORDER: Ordering = Ordering::SeqCst;

#[repr(C)]
pub struct Held {
    pub key: AtomicI64,
    /// 0 free, 1 shared, 2 exclusive.
    pub mode: AtomicU8,
    /// Bumped (never 0) at each write of the slot by its backend.
    pub generation: AtomicU32,
    /// A generation a prover found the lock manager does not confirm (a
    /// hold dropped behind pg_distlock's back): the slot counts for nothing
    /// while it is still that generation. Any backend may write it.
    pub stale: AtomicU32,
}

impl Held {
    /// The (key, mode) it lists, unless free or found stale.
    pub fn listed(&self) -> Option<(i64, u8)> {
        let mode = self.mode.load(ORDER);
        if mode == 0 || self.stale.load(ORDER) == self.generation.load(ORDER) {
            return None;
        }
        Some((self.key.load(ORDER), mode))
    }

    /// Writes (key, mode), mode 0 for a free slot, as a new generation.
    pub fn write(&self, key: i64, mode: u8) {
        self.mode.store(0, ORDER);
        let next = self.generation.load(ORDER).wrapping_add(1).max(1);
        self.generation.store(next, ORDER);
        self.key.store(key, ORDER);
        self.mode.store(mode, ORDER);
    }
}

#[repr(C)]
pub struct OwnerEntry {
    /// The backend's pid while it has published anything; 0 when free.
    pub pid: AtomicI32,
    pub database: AtomicU32,
    /// Keyed hash of `distlock.owner`; 0 when unset (the backend is its own owner).
    pub owner_hash: AtomicU64,
    /// Odd while the backend rewrites its owner (hash, bytes, length, cut):
    /// a reader that sees it change, or odd, read a mix and reads again.
    pub owner_version: AtomicU32,
    /// The bytes of the name kept (whole characters, OWNER_BYTES at most),
    /// and whether more were cut off.
    pub owner_len: AtomicU32,
    pub owner: [AtomicU8; OWNER_BYTES],
    pub owner_cut: AtomicBool,
    /// The key it waits for, and how (0: not waiting, 1 shared, 2 exclusive).
    pub wait_key: AtomicI64,
    pub wait_mode: AtomicU8,
    /// The server-wide order of its wait: a deadlock's victim is the waiter
    /// of the cycle whose wait began last.
    pub wait_seq: AtomicU64,
    pub held: [Held; HELD_PER_BACKEND],
    pub overflowed: AtomicBool,
}

#[repr(C)]
pub struct OwnerTable {
    pub capacity: usize,
    /// Orders the waits (wait_seq).
    pub next_wait_seq: AtomicU64,
    pub entries: [OwnerEntry; 0],
}

impl OwnerTable {
    pub fn entries(&self) -> &[OwnerEntry] {
        unsafe { std::slice::from_raw_parts(self.entries.as_ptr(), self.capacity) }
    }
}

static mut TABLE: *const OwnerTable = std::ptr::null();

/// One entry per backend (client backends and background workers come
/// first in the process array, MaxBackends of them), with room to spare.
fn capacity() -> usize {
    unsafe { pg_sys::MaxBackends.max(1) as usize + 64 }
}

fn size(capacity: usize) -> usize {
    std::mem::size_of::<OwnerTable>() + capacity * std::mem::size_of::<OwnerEntry>()
}

unsafe fn initialize(table: *mut OwnerTable, capacity: usize) {
    unsafe {
        std::ptr::write_bytes(table.cast::<u8>(), 0, size(capacity));
        (*table).capacity = capacity;
    }
}

/// The space to request at preload (MaxBackends is known in shmem_request_hook).
pub(crate) fn preload_size() -> usize {
    size(capacity())
}

/// From shmem_startup_hook.
pub(crate) unsafe fn attach_preloaded() {
    unsafe {
        let mut found = false;
        let table = pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), size(capacity()), &mut found)
            .cast::<OwnerTable>();
        if !found {
            initialize(table, capacity());
        }
        TABLE = table;
    }
}

#[cfg(not(feature = "pg15"))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn init_segment(ptr: *mut std::ffi::c_void) {
    unsafe { initialize(ptr.cast::<OwnerTable>(), capacity()) }
}

/// Without preload (17+): the registry's segment, sized by the first backend.
#[cfg(not(feature = "pg15"))]
pub(crate) unsafe fn attach_registry() {
    unsafe {
        let mut found = false;
        TABLE = pg_sys::GetNamedDSMSegment(
            SEGMENT_NAME.as_ptr(),
            size(capacity()),
            Some(init_segment),
            &mut found,
        )
        .cast::<OwnerTable>();
    }
}

/// The table, once this backend has decided its shared state has one.
pub fn table() -> Option<&'static OwnerTable> {
    super::available();
    unsafe { TABLE.as_ref() }
}

/// The table without deciding where shared state lives: for a timeout
/// handler and exit callbacks, which must not.
pub fn attached_table() -> Option<&'static OwnerTable> {
    unsafe { TABLE.as_ref() }
}

/// The index of this backend's entry: that of its PGPROC in the server's
/// process array. None past the table's end.
pub fn my_index(table: &OwnerTable) -> Option<usize> {
    unsafe {
        let global = pg_sys::ProcGlobal;
        if global.is_null() || pg_sys::MyProc.is_null() {
            return None;
        }
        let index = pg_sys::MyProc.offset_from((*global).allProcs);
        (index >= 0 && (index as usize) < table.capacity).then_some(index as usize)
    }
}

/// This backend's entry (my_index).
pub fn my_entry(table: &OwnerTable) -> Option<&OwnerEntry> {
    my_index(table).map(|index| &table.entries()[index])
}

/// An owner's name as an entry lists it.
pub struct PublishedOwner {
    pub hash: u64,
    /// Its first whole characters, OWNER_BYTES bytes at most.
    pub kept: Vec<u8>,
    /// Whether bytes were cut off.
    pub cut: bool,
}

impl OwnerEntry {
    /// The owner it lists, if any: the bytes of one publication, never a
    /// mix of two (a read that overlaps a rewrite is tried again, and gives
    /// None if the backend keeps rewriting).
    pub fn published_owner(&self) -> Option<PublishedOwner> {
        for _ in 0..8 {
            let before = self.owner_version.load(ORDER);
            if before % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let hash = self.owner_hash.load(ORDER);
            let len = (self.owner_len.load(ORDER) as usize).min(OWNER_BYTES);
            let kept: Vec<u8> = self.owner[..len].iter().map(|b| b.load(ORDER)).collect();
            let cut = self.owner_cut.load(ORDER);
            if self.owner_version.load(ORDER) == before {
                return (hash != 0).then_some(PublishedOwner { hash, kept, cut });
            }
        }
        None
    }

    /// Publishes `kept` (the first whole characters of an owner whose hash
    /// is `hash`, 0 for none) as the backend's owner. Only the entry's own
    /// backend writes it.
    pub fn write_owner(&self, hash: u64, kept: &[u8], cut: bool) {
        let writing = self.owner_version.load(ORDER) | 1;
        self.owner_version.store(writing, ORDER);
        self.owner_hash.store(hash, ORDER);
        for (slot, byte) in self.owner.iter().zip(kept) {
            slot.store(*byte, ORDER);
        }
        self.owner_len.store(kept.len().min(OWNER_BYTES) as u32, ORDER);
        self.owner_cut.store(cut, ORDER);
        self.owner_version.store(writing.wrapping_add(1), ORDER);
    }

    /// Whether it lists a hold or a wait now: a backend whose holds all
    /// ended (or were never taken) shows no owner.
    pub fn lists_anything(&self) -> bool {
        self.wait_mode.load(ORDER) != 0 || self.held.iter().any(|h| h.listed().is_some())
    }

    /// Whether it holds `key` in a mode that a wait in `wait_exclusive`
    /// mode conflicts with (slots found stale count for nothing).
    pub fn blocks(&self, key: i64, wait_exclusive: bool) -> bool {
        self.held.iter().any(|h| {
            h.listed()
                .is_some_and(|(k, mode)| k == key && (wait_exclusive || mode == 2))
        })
    }
}
