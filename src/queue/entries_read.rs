//! How many entries of the queue's runnable indexes this backend's scans
//! have read: what a claim statement stepped over is the difference before
//! and after it, less the rows it returned.
//!
//! Counted, not timed: a claim that waited for a lock, ran on a starved
//! CPU or returned large jobs took long without stepping over anything,
//! and only the entries a held snapshot keeps at the head make a read from
//! the head dear. The count is PostgreSQL's own (`pg_stat_user_indexes`'
//! `idx_tup_read`), still pending in this backend: a scan counts each entry
//! it returns to the heap, entries of dead or locked rows included, and not
//! those already marked dead in the index. With `track_counts` off nothing
//! is counted and every read counts as stepping over nothing.

use pgrx::pg_sys;

use crate::version::table_oid;

/// Entries read so far (in this backend's pending statistics) from
/// `task_queue_runnable_idx` and `task_queue_queue_runnable_idx`.
pub(crate) fn runnable_entries_read() -> i64 {
    [c"task_queue_runnable_idx", c"task_queue_queue_runnable_idx"].into_iter().map(|index| entries_read(table_oid(index))).sum()
}

fn entries_read(index: pg_sys::Oid) -> i64 {
    if index == pg_sys::InvalidOid {
        return 0;
    }
    // SAFETY: looks up this backend's pending statistics; 17 and later
    // return a palloc'd copy, 15 the entry itself, read and not kept.
    let status = unsafe { pg_sys::find_tabstat_entry(index) };
    if status.is_null() {
        return 0;
    }
    #[cfg(feature = "pg15")]
    let read = unsafe { (*status).t_counts.t_tuples_returned };
    #[cfg(not(feature = "pg15"))]
    let read = unsafe { (*status).counts.tuples_returned };
    read
}
