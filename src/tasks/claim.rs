//! Taking one task: lock first, then re-check and log under the lock.

use crate::text::{self, Text};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise, require_primary, required, OrRaise};
use super::missed::{Budget, Outcome, Pending};
use crate::lock_keys::{try_lock_task, unlock_task, TryLock};
use crate::plans::{first_two, plan, types};
use crate::xact;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    Claimed { fencing_token: i64 },
    /// Another session holds the task.
    Busy,
    /// This session already runs it (a second claim would log a second run).
    AlreadyHeldHere,
    /// Disabled, not due (when due-ness was asked for), or unknown.
    NotEligible,
}

/// How a claim is held.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// A session-level advisory lock on the task's key, for as long as the
    /// session lasts or until released.
    Session,
    /// The task row's lease for this long from the claim, renewed by token
    /// from any connection (see lease.rs).
    Lease(pgrx::datum::Interval),
}

/// Claims `task_id` for `worker` with a session lock; with `due` (what a
/// fetch read of it), only while it is due, once the missed slots its
/// policy skips are skipped.
///
/// The lock is taken before the task row is read again, and that read
/// follows the row to its latest committed version, so a claim can never
/// act on a due slot that a just-committed release has already finished.
pub fn claim_for_session(client: &SpiClient<'_>, task_id: i32, worker: &Text, due: Option<(&Pending, &mut Budget)>)
    -> Claim {
    let only_if_due = due.is_some();
    match try_lock_task(task_id) {
        TryLock::Busy => return Claim::Busy,
        TryLock::AlreadyHeld => return Claim::AlreadyHeldHere,
        TryLock::Acquired => {}
    }
    if !super::legacy::may_claim(client, task_id, true) {
        unlock_task(task_id);
        return Claim::Busy;
    }
    // Counted once the lock is new to this session: re-claiming a task it
    // holds takes no lock.
    if crate::session_locks::is_full() {
        unlock_task(task_id);
        crate::session_locks::raise_full(format!("cannot claim task {task_id}"));
    }
    xact::claimed_in_this_transaction(task_id);
    if let Some((pending, budget)) = due {
        if super::missed::skip_missed(client, task_id, pending, budget, worker) == Outcome::PassOver {
            xact::forget_claim(task_id);
            unlock_task(task_id);
            return Claim::Busy;
        }
    }
    let stmt = plan(
        client,
        include_str!("../../sql/queries/claim_task.sql"),
        &[types::INT4, types::BOOL, types::TEXT, types::TIMESTAMPTZ, types::OID],
    );
    let role = crate::access::caller();
    let claimed = client
        .select(
            &*stmt,
            None,
            &[
                task_id.into(),
                only_if_due.into(),
                worker.into(),
                super::backend_start().into(),
                role.into(),
            ],
        )
        .and_then(first_two::<i64, i64>)
        .or_raise();
    match claimed {
        Some((Some(log_id), Some(fencing_token))) => {
            crate::lock_keys::lock_claim(task_id, fencing_token);
            super::held::claimed(task_id, super::held::Held { log_id, worker: worker.clone(), role });
            Claim::Claimed { fencing_token }
        }
        _ => {
            xact::forget_claim(task_id);
            unlock_task(task_id);
            Claim::NotEligible
        }
    }
}

pub fn task_exists(client: &SpiClient<'_>, task_id: i32) -> bool {
    let stmt = plan(client, include_str!("../../sql/queries/task_exists.sql"), &[types::INT4]);
    client
        .select(&*stmt, None, &[task_id.into()])
        .map(|rows| !rows.is_empty())
        .or_raise()
}

pub fn raise_unknown_task(task_id: i32) -> ! {
    raise(PgSqlErrorCode::ERRCODE_NO_DATA_FOUND, format!("task {task_id} does not exist"))
}

/// Claims one task now, due or not, without waiting. True only if this call
/// took the task and logged a `running` run; false if another session holds
/// it, it is disabled, or this session already runs it.
#[pg_extern]
fn try_acquire_task_lock(p_task_id: Option<i32>, p_worker_id: Option<Text>) -> bool {
    require_primary("claim tasks");
    let task_id = required(p_task_id, "p_task_id");
    let worker = text::name(p_worker_id, "p_worker_id");
    crate::access::connect(|client| {
        crate::scopes::require_task(client, task_id);
        claim_once(client, task_id, &worker)
    })
}

fn claim_once(client: &SpiClient<'_>, task_id: i32, worker: &Text) -> bool {
    match claim_for_session(client, task_id, worker, None) {
        Claim::Claimed { .. } => true,
        Claim::NotEligible if !task_exists(client, task_id) => raise_unknown_task(task_id),
        Claim::NotEligible | Claim::Busy | Claim::AlreadyHeldHere => false,
    }
}
