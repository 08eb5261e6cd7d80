//! Whether the backend holding a task's lease-mode claim is still connected,
//! read from the server's backend status array rather than
//! `pg_stat_activity`: that view hides other roles' `backend_start` from
//! callers without `pg_read_all_stats`, so a pid reused by a new session
//! would read as the old one. Keyed by task, in the caller's monitor scope,
//! so that nobody can probe arbitrary sessions (trying every microsecond
//! against a (pid, start) oracle recovers a start PostgreSQL hides).

use pgrx::datum::TimestampWithTimeZone;
use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::errors::OrRaise;
use crate::plans::{first_row, plan, types};
use crate::scopes::{of_caller, task_admitted, Capability};
use crate::text::Text;

/// Whether the backend that made or last renewed task `p_task_id`'s
/// lease-mode claim (as the task row records it) is connected now. NULL
/// when none is recorded, for a task outside the caller's monitor scope or
/// unknown (alike), and on a standby, where the recorded backends are the
/// primary's. `distlock.running_tasks` calls it through
/// `distlock.lease_backend_alive`.
#[pg_extern]
fn lease_backend_connected(p_task_id: Option<i32>) -> Option<bool> {
    let task_id = p_task_id?;
    if unsafe { pg_sys::RecoveryInProgress() } {
        return None;
    }
    // The caller's scope, read before the statement runs with the owner's rights.
    let scope = of_caller(Capability::Monitor);
    let recorded = crate::access::connect(|client| {
        let stmt = plan(client, include_str!("../sql/queries/task_lease_backend.sql"), &[types::INT4]);
        client
            .select(&*stmt, None, &[task_id.into()])
            .and_then(|rows| {
                first_row(rows, |row| {
                    Ok((
                        row.get::<i32>(1)?,
                        row.get::<TimestampWithTimeZone>(2)?,
                        row.get::<Text>(3)?,
                        row.get::<Text>(4)?,
                    ))
                })
            })
            .or_raise()
    });
    let (Some(pid), Some(started), Some(name), Some(kind)) = recorded? else {
        return None;
    };
    if !task_admitted(&scope, &name, &kind) {
        return None;
    }
    Some(connected(pid, started.into()))
}

/// Whether backend `pid`, started at `started`, is connected to this
/// database. PostgreSQL snapshots the backend status array once per
/// transaction (at its first read, as pg_stat_activity does), so a backend
/// that started after this transaction began may be missing from it: for
/// such a one the process table answers (a live backend with that pid in
/// this database; a pid reused within this one transaction would pass).
fn connected(pid: i32, started: pg_sys::TimestampTz) -> bool {
    let database = unsafe { pg_sys::MyDatabaseId };
    let backends = unsafe { pg_sys::pgstat_fetch_stat_numbackends() };
    let in_snapshot = (1..=backends).any(|index| {
        let entry = local_entry(index);
        // SAFETY: a non-null entry points into the snapshot, valid until the
        // transaction ends.
        !entry.is_null() && {
            let status = unsafe { &(*entry).backendStatus };
            status.st_procpid == pid && status.st_proc_start_timestamp == started && status.st_databaseid == database
        }
    });
    in_snapshot
        || (started > unsafe { pg_sys::GetCurrentTransactionStartTimestamp() } && {
            // SAFETY: BackendPidGetProc takes ProcArrayLock; the PGPROC it
            // returns stays in shared memory (only its contents may change).
            let proc = unsafe { pg_sys::BackendPidGetProc(pid) };
            !proc.is_null() && unsafe { (*proc).databaseId } == database
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

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use super::*;

    /// A session is its pid and its start: the same pid with another start
    /// (a reused pid) is not it.
    #[pg_test]
    fn backend_status_a_session_is_its_pid_and_its_start() {
        let (pid, started) = unsafe { (pg_sys::MyProcPid, pg_sys::MyStartTimestamp) };
        assert!(connected(pid, started));
        assert!(!connected(pid, started + 1), "a start within the snapshot's reach is checked");
        assert!(!connected(pid + 1_000_000, started));
    }
}
