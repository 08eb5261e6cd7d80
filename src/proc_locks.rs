//! Whether one given backend holds a lock, read from that backend's own
//! entries in the lock table.
//!
//! Taking a lock for an instant only tells whether *someone* holds it. A
//! fencing check must ask whether the claim's *own* holder still does: after
//! the holder lost its lock (`DISCARD ALL`, `pg_advisory_unlock_all()`), a
//! new claimer in a transaction it has not committed holds the same lock,
//! while the old claim's token is still the task's current one. Each
//! backend's PGPROC lists the PROCLOCKs it owns, one list per lock-table
//! partition, and that partition's LWLock guards the list (see
//! src/backend/storage/lmgr/README), so reading one backend's list for the
//! lock's partition is exact and costs one shared LWLock. Advisory locks
//! never take the fast path, so every hold is in those lists.

use pgrx::pg_sys;

/// A link of a PostgreSQL list embedded in shared memory: `SHM_QUEUE` up to
/// 15 and `dlist_node` from 16 on share this layout (`prev`, then `next`),
/// and both lists are circular through their head.
#[repr(C)]
struct Link {
    prev: *const Link,
    next: *const Link,
}

/// Whether the live backend `pid` holds `tag` in `mode` (at session or
/// transaction level). False for a pid no backend has.
pub fn backend_holds(pid: i32, tag: &pg_sys::LOCKTAG, mode: pg_sys::LOCKMODE) -> bool {
    let partition = unsafe { pg_sys::LockTagHashCode(tag) } % pg_sys::NUM_LOCK_PARTITIONS;
    backend_holds_matching(pid, partition..partition + 1, mode, |held| same_tag(held, tag))
}

/// Whether the live backend `pid` holds, in `mode`, any lock whose tag
/// `matches`; every partition is read, one at a time.
pub fn backend_holds_any(pid: i32, mode: pg_sys::LOCKMODE, matches: impl Fn(&pg_sys::LOCKTAG) -> bool) -> bool {
    backend_holds_matching(pid, 0..pg_sys::NUM_LOCK_PARTITIONS, mode, matches)
}

fn backend_holds_matching(
    pid: i32,
    partitions: std::ops::Range<u32>,
    mode: pg_sys::LOCKMODE,
    matches: impl Fn(&pg_sys::LOCKTAG) -> bool,
) -> bool {
    // SAFETY: BackendPidGetProc returns a PGPROC of the shared array or
    // null; the partition's LWLock, held shared, keeps that PGPROC's list
    // for the partition and the PROCLOCKs on it from changing while read.
    unsafe {
        let proc_ = pg_sys::BackendPidGetProc(pid);
        if proc_.is_null() {
            return false;
        }
        for partition in partitions {
            let lwlock = &raw mut (*pg_sys::MainLWLockArray
                .add((pg_sys::LOCK_MANAGER_LWLOCK_OFFSET + partition) as usize))
            .lock;
            pg_sys::LWLockAcquire(lwlock, pg_sys::LWLockMode::LW_SHARED);
            // The slot may have been handed to another backend since the lookup.
            let holds = (*proc_).pid == pid && list_holds(proc_, partition as usize, mode, &matches);
            pg_sys::LWLockRelease(lwlock);
            if holds {
                return true;
            }
        }
        false
    }
}

/// Walks `proc_`'s PROCLOCKs of `partition` for one holding `mode` on a lock
/// whose tag `matches`.
///
/// # Safety
/// The partition's lock-manager LWLock is held.
unsafe fn list_holds(
    proc_: *const pg_sys::PGPROC,
    partition: usize,
    mode: pg_sys::LOCKMODE,
    matches: &impl Fn(&pg_sys::LOCKTAG) -> bool,
) -> bool {
    let head = (&raw const (*proc_).myProcLocks[partition]).cast::<Link>();
    let link_offset = std::mem::offset_of!(pg_sys::PROCLOCK, procLink);
    let mode_bit: pg_sys::LOCKMASK = 1 << mode;
    let mut link = (*head).next;
    while !link.is_null() && link != head {
        let proclock = link.cast::<u8>().sub(link_offset).cast::<pg_sys::PROCLOCK>();
        let lock = (*proclock).tag.myLock;
        if !lock.is_null() && (*proclock).holdMask & mode_bit != 0 && matches(&(*lock).tag) {
            return true;
        }
        link = (*link).next;
    }
    false
}

fn same_tag(a: &pg_sys::LOCKTAG, b: &pg_sys::LOCKTAG) -> bool {
    a.locktag_field1 == b.locktag_field1
        && a.locktag_field2 == b.locktag_field2
        && a.locktag_field3 == b.locktag_field3
        && a.locktag_field4 == b.locktag_field4
        && a.locktag_type == b.locktag_type
        && a.locktag_lockmethodid == b.locktag_lockmethodid
}
