//! Whether a backend is still connected, read from the server's backend
//! status array rather than `pg_stat_activity`: that view hides other roles'
//! `backend_start` from callers without `pg_read_all_stats`, so a pid reused
//! by a new session would read as the old one. Here every caller gets the
//! same answer, and nothing but yes or no.

use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;
use pgrx::prelude::*;

/// Whether the backend with `p_pid` that started at `p_backend_start` is
/// connected to this server now. NULL for NULL arguments and on a standby,
/// where the pids recorded in replicated rows are the primary's.
#[pg_extern]
fn backend_is_connected(p_pid: Option<i32>, p_backend_start: Option<TimestampWithTimeZone>) -> Option<bool> {
    let (pid, started) = (p_pid?, p_backend_start?);
    if unsafe { pg_sys::RecoveryInProgress() } {
        return None;
    }
    Some(connected(pid, started.into()))
}

/// Looks through this transaction's snapshot of the backend status array
/// (PostgreSQL takes it once per transaction, as pg_stat_activity does).
fn connected(pid: i32, started: pg_sys::TimestampTz) -> bool {
    let backends = unsafe { pg_sys::pgstat_fetch_stat_numbackends() };
    (1..=backends).any(|index| {
        let entry = local_entry(index);
        // SAFETY: a non-null entry points into the snapshot, valid until the
        // transaction ends.
        !entry.is_null()
            && unsafe {
                (*entry).backendStatus.st_procpid == pid && (*entry).backendStatus.st_proc_start_timestamp == started
            }
    })
}

#[cfg(feature = "pg15")]
fn local_entry(index: i32) -> *mut pg_sys::LocalPgBackendStatus {
    unsafe { pg_sys::pgstat_fetch_stat_local_beentry(index) }
}

#[cfg(not(feature = "pg15"))]
fn local_entry(index: i32) -> *mut pg_sys::LocalPgBackendStatus {
    unsafe { pg_sys::pgstat_get_local_beentry_by_index(index) }
}
