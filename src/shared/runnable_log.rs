//! The last commits that made queue jobs runnable, each with the earliest
//! place in the claim's index order among the jobs it made runnable (and
//! its database and queue), numbered in the order they were written. A
//! consumer that remembers where its claims left off reads the commits
//! since its last claim to learn whether any job appeared behind that
//! place (see queue/claim_start.rs). A ring of fixed size, beside the main
//! shared state: in the server's shared memory when preloaded, else a DSM
//! registry segment.

use std::ffi::CStr;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64};

use pgrx::pg_sys;

use super::sleepers::ORDER;

/// How many commits the ring holds: a reader that falls further behind
/// learns only that it cannot tell.
pub const ENTRIES: usize = 1024;

const SHMEM_NAME: &CStr = c"pg_distlock runnable log";
#[cfg(not(feature = "pg15"))]
const SEGMENT_NAME: &CStr = c"pg_distlock runnable log v1";

/// A place in the claim's index: priority (descending), run_after, id.
pub type Key = (i32, i64, i64);

#[repr(C)]
struct Entry {
    /// The entry's number; 0 while it is being written (or never was).
    number: AtomicU64,
    database: AtomicU32,
    /// The queue's hash; 0 for jobs of any queue.
    queue: AtomicU32,
    priority: AtomicI32,
    run_after: AtomicI64,
    id: AtomicI64,
}

#[repr(C)]
pub struct RunnableLog {
    /// How many entries were ever written; the next one is number `written + 1`.
    written: AtomicU64,
    entries: [Entry; ENTRIES],
}

/// Entries were overwritten or are being written: the reader cannot tell
/// what they said.
#[derive(Debug, PartialEq)]
pub struct Unknown;

impl RunnableLog {
    /// The number of the last entry written.
    pub fn position(&self) -> u64 {
        self.written.load(ORDER)
    }

    /// Records that a commit of `database` made jobs of `queue` (0: of any
    /// queue) runnable, the earliest of them at `key`. Called once the
    /// commit is visible, so that a reader whose snapshot is taken after
    /// reading a position past this entry sees the jobs.
    pub fn write(&self, database: u32, queue: u32, key: Key) {
        let number = self.written.fetch_add(1, ORDER) + 1;
        let entry = &self.entries[number as usize % ENTRIES];
        entry.number.store(0, ORDER);
        entry.database.store(database, ORDER);
        entry.queue.store(queue, ORDER);
        entry.priority.store(key.0, ORDER);
        entry.run_after.store(key.1, ORDER);
        entry.id.store(key.2, ORDER);
        entry.number.store(number, ORDER);
    }

    /// Calls `each` with the place of every entry after `after` up to
    /// `upto` of `database` and of `queue` (None: any queue; entries for
    /// any queue concern every reader).
    pub fn read(&self, after: u64, upto: u64, database: u32, queue: Option<u32>, mut each: impl FnMut(Key)) -> Result<(), Unknown> {
        if upto < after || upto - after > ENTRIES as u64 {
            return Err(Unknown);
        }
        for number in after + 1..=upto {
            let entry = &self.entries[number as usize % ENTRIES];
            if entry.number.load(ORDER) != number {
                return Err(Unknown);
            }
            let (entry_database, entry_queue) = (entry.database.load(ORDER), entry.queue.load(ORDER));
            let key = (entry.priority.load(ORDER), entry.run_after.load(ORDER), entry.id.load(ORDER));
            if entry.number.load(ORDER) != number {
                return Err(Unknown);
            }
            if entry_database == database && (entry_queue == 0 || queue.is_none_or(|q| q == entry_queue)) {
                each(key);
            }
        }
        Ok(())
    }
}

static mut LOG: *const RunnableLog = std::ptr::null();

fn size() -> usize {
    std::mem::size_of::<RunnableLog>()
}

/// The space to request at preload.
pub(crate) fn preload_size() -> usize {
    size()
}

/// From shmem_startup_hook.
pub(crate) unsafe fn attach_preloaded() {
    unsafe {
        let mut found = false;
        let log = pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), size(), &mut found).cast::<RunnableLog>();
        if !found {
            std::ptr::write_bytes(log.cast::<u8>(), 0, size());
        }
        LOG = log;
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
        LOG = pg_sys::GetNamedDSMSegment(SEGMENT_NAME.as_ptr(), size(), Some(init_segment), &mut found)
            .cast::<RunnableLog>();
    }
}

/// The log, once this backend has decided its shared state has one.
pub fn log() -> Option<&'static RunnableLog> {
    super::available();
    unsafe { LOG.as_ref() }
}
