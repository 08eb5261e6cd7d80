//! What differs between the PostgreSQL versions pg_distlock builds for
//! (Cargo features `pg15`, `pg17`, `pg18`), kept here so that the rest of
//! the code calls one function whatever the version.

use pgrx::pg_sys;

/// Whether this backend holds `tag` in exactly `mode`. PostgreSQL 17 added
/// the `orstronger` argument; false keeps 15's meaning.
///
/// # Safety
/// As `pg_sys::LockHeldByMe`: a backend with the lock manager set up.
pub unsafe fn lock_held_by_me(tag: &pg_sys::LOCKTAG, mode: pg_sys::LOCKMODE) -> bool {
    #[cfg(feature = "pg15")]
    {
        pg_sys::LockHeldByMe(tag, mode)
    }
    #[cfg(not(feature = "pg15"))]
    {
        pg_sys::LockHeldByMe(tag, mode, false)
    }
}

/// The primary key index of `relation`, InvalidOid without one (nor with a
/// deferrable one: 18 made that a choice, and 15 never returned it).
///
/// # Safety
/// `relation` is an open relation.
pub unsafe fn primary_key_index(relation: pg_sys::Relation) -> pg_sys::Oid {
    #[cfg(not(feature = "pg18"))]
    {
        pg_sys::RelationGetPrimaryKeyIndex(relation)
    }
    #[cfg(feature = "pg18")]
    {
        pg_sys::RelationGetPrimaryKeyIndex(relation, false)
    }
}

/// Whether `proc_` serves a client: not a background worker. 18 replaced
/// `isBackgroundWorker` by `isRegularBackend`.
///
/// # Safety
/// `proc_` points to a live PGPROC.
pub unsafe fn is_client_backend(proc_: *const pg_sys::PGPROC) -> bool {
    #[cfg(not(feature = "pg18"))]
    {
        !(*proc_).isBackgroundWorker
    }
    #[cfg(feature = "pg18")]
    {
        (*proc_).isRegularBackend
    }
}

/// How to give pg_distlock shared memory on this version.
#[cfg(feature = "pg15")]
pub const SHARED_MEMORY_HINT: &str = "Add pg_distlock to shared_preload_libraries and restart the server.";
#[cfg(not(feature = "pg15"))]
pub const SHARED_MEMORY_HINT: &str =
    "Turn distlock.dynamic_shared_memory on (and restart), or add pg_distlock to shared_preload_libraries.";

/// The wait event a consumer waiting for a job reports in
/// `pg_stat_activity`: `Extension`/`DistlockQueueWait` from PostgreSQL 17 on
/// (custom wait events), plain `Extension`/`Extension` on 15.
pub fn queue_wait_event() -> u32 {
    #[cfg(feature = "pg15")]
    {
        pg_sys::PG_WAIT_EXTENSION
    }
    #[cfg(not(feature = "pg15"))]
    {
        custom_wait_event::queue_wait()
    }
}

#[cfg(not(feature = "pg15"))]
mod custom_wait_event {
    use pgrx::pg_sys;
    use std::cell::Cell;

    thread_local! {
        static QUEUE_WAIT: Cell<u32> = const { Cell::new(0) };
    }

    /// Registered once per backend: the name is looked up in (or added to)
    /// the server's shared table of custom wait events, which keeps it for
    /// every backend after.
    pub fn queue_wait() -> u32 {
        QUEUE_WAIT.with(|cached| {
            if cached.get() == 0 {
                cached.set(unsafe { pg_sys::WaitEventExtensionNew(c"DistlockQueueWait".as_ptr()) });
            }
            cached.get()
        })
    }
}

/// A wait set that lasts as long as the backend. 17 made its owner a
/// resource owner (none: the backend's life) instead of a memory context.
///
/// # Safety
/// As `pg_sys::CreateWaitEventSet`.
pub unsafe fn create_backend_wait_set(events: i32) -> *mut pg_sys::WaitEventSet {
    #[cfg(feature = "pg15")]
    {
        pg_sys::CreateWaitEventSet(pg_sys::TopMemoryContext, events)
    }
    #[cfg(not(feature = "pg15"))]
    {
        pg_sys::CreateWaitEventSet(std::ptr::null_mut(), events)
    }
}
