//! Fencing tokens: downstream writes carry the token of the claim they
//! belong to, and are refused once that claim is no longer the current one.

use pgrx::prelude::*;

use crate::errors::{required, OrRaise};
use crate::lock_keys::{backend_holds_any_claim, backend_holds_claim, backend_holds_task_lock, holds_claim_lock, task_lock_id, TASK_LOCK_CLASS};
use crate::plans::{first_row, plan, types};

/// True only for the token of the claim that currently runs the task, and,
/// for a session claim, only while the backend that made it still holds the
/// task's lock: a holder that died or lost its lock (pg_terminate_backend, a
/// crash, a pooler's DISCARD ALL, pg_advisory_unlock_all) ends its token at
/// once, before any sweep runs, and no other backend's hold of the lock (a
/// new claimer whose transaction has not committed yet) revives it.
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
                first_row(rows, |row| {
                    Ok(CurrentClaim {
                        token: row.get::<i64>(1)?,
                        session_claim: row.get::<bool>(2)?.unwrap_or(false),
                        holder_pid: row.get::<i32>(3)?,
                        same_backend: row.get::<bool>(4)?.unwrap_or(false),
                        lock_id: row.get::<i64>(5)?,
                    })
                })
            })
            .or_raise()
    });
    match current {
        Some(claim) if claim.token == Some(token) => !claim.session_claim || claim.holder_still_holds(task_id, token),
        _ => false,
    }
}

/// The task's current claim, as current_token.sql reads it.
struct CurrentClaim {
    token: Option<i64>,
    session_claim: bool,
    /// The backend that made a session claim (none when its log row is gone).
    holder_pid: Option<i32>,
    /// Whether the backend with that pid is the one that made the claim
    /// (same start time), not a later one given a reused pid.
    same_backend: bool,
    /// The key the claim logged: its own claim lock's from 0.4.0 on, the
    /// task lock's for a claim of an older library.
    lock_id: Option<i64>,
}

impl CurrentClaim {
    /// Whether the claim's own backend still holds *this* claim, asked of
    /// that backend's locks: not "is the task's lock busy", which a new
    /// claimer also makes it, nor "does it hold the task", which it also does
    /// after it lost this claim and claimed the task again.
    fn holder_still_holds(&self, task_id: i32, token: i64) -> bool {
        let Some(pid) = self.holder_pid else {
            return false;
        };
        // Task id TASK_LOCK_CLASS is the one whose claim keys can take the
        // old form too (with a token whose low 32 bits are that number): it
        // is always read as a claim of this library, which at worst refuses a
        // token of an older library's claim of that one task.
        if self.lock_id != Some(task_lock_id(task_id)) || task_id == TASK_LOCK_CLASS {
            // A claim of this library (or a row written by hand): only its
            // own claim lock stands for it.
            return if pid == unsafe { pg_sys::MyProcPid } {
                holds_claim_lock(task_id, token)
            } else {
                backend_holds_claim(pid, task_id, token)
            };
        }
        // A claim made by a library before 0.4.0, which takes no claim lock:
        // its backend's hold of the task lock (for 0.2.0's, the legacy tag)
        // stands for it, unless that backend holds a claim lock of the task
        // (it claimed again since, with this library).
        pid != unsafe { pg_sys::MyProcPid }
            && self.same_backend
            && !backend_holds_any_claim(pid, task_id)
            && backend_holds_task_lock(pid, task_id)
    }
}
