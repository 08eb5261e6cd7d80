//! How many entries of the queue's runnable indexes this backend's scans
//! have read, and how many of them led to a row its snapshot sees: what a
//! claim statement stepped over is the difference before and after it,
//! less the rows it returned.
//!
//! Counted, not timed: a claim that waited for a lock, ran on a starved
//! CPU or returned large jobs took long without stepping over anything,
//! and only the entries a held snapshot keeps at the head make a read from
//! the head dear. The counts are PostgreSQL's own (`pg_stat_user_indexes`'
//! `idx_tup_read` and `idx_tup_fetch`), still pending in this backend: a
//! scan counts each entry it returns to the heap, entries of dead or locked
//! rows included but not those already marked dead in the index, and each
//! of them whose row it then sees. With `track_counts` off nothing is
//! counted and every read counts as stepping over nothing.

use pgrx::pg_sys;

use crate::version::table_oid;

/// Entries read so far from `task_queue_runnable_idx` and
/// `task_queue_queue_runnable_idx`, and how many of them led to a row
/// version the scan's snapshot sees.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub(crate) struct EntriesRead {
    pub read: i64,
    pub seen: i64,
}

impl EntriesRead {
    /// What a statement that returned `returned` rows stepped over between
    /// `before` and `self`: entries of versions it could not see (dead, or
    /// made by transactions after its snapshot), and rows it saw and passed
    /// over (locked by another consumer, of a paused or limited queue,
    /// outside the caller's scope).
    pub(crate) fn stepped_over_since(self, before: EntriesRead, returned: i64) -> SteppedOver {
        let read = self.read - before.read;
        let seen = self.seen - before.seen;
        SteppedOver { unseen: (read - seen).max(0), passed: (seen - returned).max(0) }
    }
}

/// The index entries a read stepped over: those of row versions it could
/// not see, which vacuum or a later scan removes or marks dead once no
/// snapshot needs them, and those of rows it saw and passed over, which
/// stay.
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub(crate) struct SteppedOver {
    pub unseen: i64,
    pub passed: i64,
}

impl SteppedOver {
    /// Of the rows it passed over, `lasting` (at most all) are ones a later
    /// read passes over again; the rest were held by a row lock (SKIP
    /// LOCKED: another consumer's claim, a prepared one, an UPDATE by hand)
    /// and go as the versions it could not see do: their lockers ran
    /// before the read, and once the xmin horizon has passed it they have
    /// ended.
    pub(crate) fn with_lasting(self, lasting: i64) -> SteppedOver {
        let passed = lasting.clamp(0, self.passed);
        SteppedOver { unseen: self.unseen.saturating_add(self.passed - passed), passed }
    }
}

/// This backend's counts so far.
pub(crate) fn runnable_entries_read() -> EntriesRead {
    [c"task_queue_runnable_idx", c"task_queue_queue_runnable_idx"].into_iter().map(|index| entries_read(table_oid(index))).fold(
        EntriesRead::default(),
        |sum, entries| EntriesRead { read: sum.read + entries.read, seen: sum.seen + entries.seen },
    )
}

fn entries_read(index: pg_sys::Oid) -> EntriesRead {
    if index == pg_sys::InvalidOid {
        return EntriesRead::default();
    }
    // SAFETY: looks up this backend's pending statistics; 17 and later
    // return a palloc'd copy, 15 the entry itself, read and not kept.
    let status = unsafe { pg_sys::find_tabstat_entry(index) };
    if status.is_null() {
        return EntriesRead::default();
    }
    // An index scan counts a fetch on the index when the row it leads to
    // is visible (index_fetch_heap).
    #[cfg(feature = "pg15")]
    let (read, seen) = unsafe { ((*status).t_counts.t_tuples_returned, (*status).t_counts.t_tuples_fetched) };
    #[cfg(not(feature = "pg15"))]
    let (read, seen) = unsafe { ((*status).counts.tuples_returned, (*status).counts.tuples_fetched) };
    EntriesRead { read, seen }
}
