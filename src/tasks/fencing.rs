//! Fencing tokens: downstream writes carry the token of the claim they
//! belong to, and are refused once that claim is no longer the current one.

use pgrx::prelude::*;

use crate::errors::{required, OrRaise};
use crate::lock_keys::{backend_holds_task_lock, holds_task_lock};
use crate::plans::{plan, types};

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
                if rows.is_empty() {
                    return Ok(None);
                }
                let row = rows.first();
                Ok(Some(CurrentClaim {
                    token: row.get::<i64>(1)?,
                    session_claim: row.get::<bool>(2)?.unwrap_or(false),
                    holder_pid: row.get::<i32>(3)?,
                    same_backend: row.get::<bool>(4)?.unwrap_or(false),
                }))
            })
            .or_raise()
    });
    match current {
        Some(claim) if claim.token == Some(token) => !claim.session_claim || claim.holder_still_holds(task_id),
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
}

impl CurrentClaim {
    /// Whether the claim's own backend holds the task's lock, asked of that
    /// backend: not "is the lock busy", which a new claimer also makes it.
    fn holder_still_holds(&self, task_id: i32) -> bool {
        match self.holder_pid {
            Some(pid) if pid == unsafe { pg_sys::MyProcPid } => holds_task_lock(task_id),
            Some(pid) => self.same_backend && backend_holds_task_lock(pid, task_id),
            None => false,
        }
    }
}
