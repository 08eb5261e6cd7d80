//! The consumers waiting for jobs, one entry per sleeping backend, so that
//! a commit can wake as many of them as its runnable jobs need (each takes
//! up to its batch), of the queue that got them, by setting their latches:
//! no herd. A table of its own,
//! beside the main shared state (whose layout it leaves unchanged): in the
//! server's shared memory when preloaded, else a DSM registry segment.

use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use pgrx::pg_sys;

/// Queues a sleeper names one by one; one that takes more is woken as a
/// consumer of every queue.
pub const NAMED_QUEUES: usize = 8;

const SHMEM_NAME: &CStr = c"pg_distlock queue sleepers";
#[cfg(not(feature = "pg15"))]
const SEGMENT_NAME: &CStr = c"pg_distlock queue sleepers v1";

#[repr(C)]
pub struct Sleeper {
    /// The sleeping backend's pid; 0 for a free entry.
    pub pid: AtomicI32,
    /// Its latch (in the server's shared memory, at the same address in
    /// every backend); stale when the latch's owner is no longer `pid`.
    pub latch: AtomicUsize,
    pub database: AtomicU32,
    /// How many of `queues` it names; 0 for every queue.
    pub queue_count: AtomicU32,
    pub queues: [AtomicU32; NAMED_QUEUES],
    /// Its scope limits the jobs it may take, or it names more queues than
    /// `queues` holds: woken for every job of its queues, beyond the count a
    /// commit wakes, and never taken to know a due time.
    pub restricted: AtomicBool,
    /// How many jobs its next look claims at most (its batch): a waker
    /// counts it as taking that many of the jobs it woke sleepers for.
    pub wants: AtomicU32,
    /// Set by the waker that set its latch, cleared by the sleeper when it
    /// looks: a waker counts only sleepers it woke itself.
    pub woken: AtomicBool,
    /// The queue (hash) of the wake-up it got; 0 for any.
    pub woken_for: AtomicU32,
    /// When it wakes by itself (microseconds since 2000, PostgreSQL's epoch).
    pub until: AtomicI64,
}

impl Sleeper {
    /// The sleeping backend, when the entry is in use by a live one (a
    /// backend that exited without clearing it no longer owns the latch).
    pub fn live_pid(&self) -> Option<i32> {
        let pid = self.pid.load(ORDER);
        (pid > 0 && latch_owned_by(self.latch.load(ORDER), pid)).then_some(pid)
    }
}

#[repr(C)]
pub struct Sleepers {
    pub capacity: usize,
    /// Entries in use (a waker with none to wake returns at once).
    pub sleeping: AtomicU32,
    /// Latches set by wakers since the server started.
    pub wakeups: AtomicU64,
    pub entries: [Sleeper; 0],
}

impl Sleepers {
    pub fn entries(&self) -> &[Sleeper] {
        unsafe { std::slice::from_raw_parts(self.entries.as_ptr(), self.capacity) }
    }
}

static mut SLEEPERS: *const Sleepers = std::ptr::null();

fn capacity() -> usize {
    unsafe { pg_sys::MaxBackends.max(1) as usize }
}

fn size(capacity: usize) -> usize {
    std::mem::size_of::<Sleepers>() + capacity * std::mem::size_of::<Sleeper>()
}

unsafe fn initialize(table: *mut Sleepers, capacity: usize) {
    unsafe {
        std::ptr::write_bytes(table.cast::<u8>(), 0, size(capacity));
        (*table).capacity = capacity;
    }
}

/// The space to request at preload, from shmem_request_hook (MaxBackends is known there).
pub(crate) fn preload_size() -> usize {
    size(capacity())
}

/// From shmem_startup_hook.
pub(crate) unsafe fn attach_preloaded() {
    unsafe {
        let mut found = false;
        let table = pg_sys::ShmemInitStruct(SHMEM_NAME.as_ptr(), size(capacity()), &mut found).cast::<Sleepers>();
        if !found {
            initialize(table, capacity());
        }
        SLEEPERS = table;
    }
}

#[cfg(not(feature = "pg15"))]
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn init_segment(ptr: *mut std::ffi::c_void) {
    unsafe { initialize(ptr.cast::<Sleepers>(), capacity()) }
}

/// Without preload (17+): the registry's segment, sized by the first backend.
#[cfg(not(feature = "pg15"))]
pub(crate) unsafe fn attach_registry() {
    unsafe {
        let mut found = false;
        SLEEPERS =
            pg_sys::GetNamedDSMSegment(SEGMENT_NAME.as_ptr(), size(capacity()), Some(init_segment), &mut found)
                .cast::<Sleepers>();
    }
}

/// The table, once this backend has decided its shared state has one.
pub fn table() -> Option<&'static Sleepers> {
    super::available();
    unsafe { SLEEPERS.as_ref() }
}

/// Whether the latch at `latch` still belongs to process `pid`.
fn latch_owned_by(latch: usize, pid: i32) -> bool {
    latch != 0 && unsafe { (*(latch as *const pg_sys::Latch)).owner_pid } == pid
}

pub fn set_latch(latch: usize) {
    unsafe { pg_sys::SetLatch(latch as *mut pg_sys::Latch) }
}

pub fn my_latch() -> usize {
    unsafe { std::ptr::addr_of_mut!((*pg_sys::MyProc).procLatch) as usize }
}

pub const ORDER: Ordering = Ordering::SeqCst;
