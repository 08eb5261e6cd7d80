//! Fencing tokens: downstream writes carry the token of the claim they
//! belong to, and are refused once that claim is no longer the current one.

use pgrx::prelude::*;

use crate::errors::{required, OrRaise};
use crate::lock_keys::{holds_task_lock, legacy_task_lock_busy, task_lock_holder, TaskLockHolder};
use crate::plans::{plan, types};

/// True only for the token of the claim that currently runs the task, and,
/// for a session claim, only while its holder still holds the task's lock:
/// a holder that died or lost its session (pg_terminate_backend, a crash, a
/// pooler's DISCARD ALL) ends its token at once, before any sweep runs.
#[pg_extern(stable)]
fn check_fencing_token(p_task_id: Option<i32>, p_token: Option<i64>) -> bool {
    let task_id = required(p_task_id, "p_task_id");
    let token = required(p_token, "p_token");
    let current = crate::access::connect(|client| {
        crate::scopes::require_task(client, task_id);
        let sql = if crate::version::has_column(c"scheduled_tasks", c"lease_expires_at") {
            include_str!("../../sql/queries/current_token.sql")
        } else {
            include_str!("../../sql/queries/current_token_0_1_0.sql")
        };
        let stmt = plan(client, sql, &[types::INT4]);
        client
            .select(&*stmt, None, &[task_id.into()])
            .and_then(|rows| {
                if rows.is_empty() {
                    return Ok(None);
                }
                let row = rows.first();
                Ok(Some((row.get::<i64>(1)?, row.get::<bool>(2)?.unwrap_or(false), row.get::<i32>(3)?)))
            })
            .or_raise()
    });
    match current {
        Some((Some(current), session_claim, holder_pid)) if current == token => {
            !session_claim || session_holder_alive(task_id, holder_pid)
        }
        _ => false,
    }
}

/// Whether the backend that made a session claim still holds the task's
/// lock, without reading the lock table: a free lock means the holder let go
/// or is gone, and a busy one counts as the holder's while its process lives
/// (a new claimer of a dead holder's task also makes the lock busy, so the
/// process is checked first). The probe takes a free lock for an instant: a
/// claimer that tries the task in that instant skips it until its next look.
fn session_holder_alive(task_id: i32, holder_pid: Option<i32>) -> bool {
    let my_pid = unsafe { pg_sys::MyProcPid };
    if holder_pid == Some(my_pid) {
        return holds_task_lock(task_id);
    }
    if let Some(pid) = holder_pid {
        if unsafe { pg_sys::BackendPidGetProc(pid) }.is_null() {
            return false;
        }
    }
    match task_lock_holder(task_id) {
        TaskLockHolder::AnotherBackend => true,
        // A claim made by 0.2.0's library holds only the legacy tag.
        TaskLockHolder::Nobody => legacy_task_lock_busy(task_id),
        TaskLockHolder::ThisBackend => false,
    }
}
