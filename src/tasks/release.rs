//! Finishing a claim.

use crate::text::{self, Text};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::PgSqlErrorCode;

use super::claim::{raise_unknown_task, task_exists};
use crate::errors::{raise, raise_with_hint, required, OrRaise};
use crate::lock_keys::{holds_task_lock, unlock_task};
use crate::plans::{first_value, plan, types};
use crate::xact;

/// What ending a claim's log row found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// The claim was not running (any more): nothing changed.
    NotRunning,
    /// The log row ended, but another claim has since taken the task: the
    /// task row was left as that claim has it.
    Replaced,
    /// The log row ended and the task's next run is scheduled.
    Current,
}

/// Ends running claim `log_id` with `status` and, when its token is still
/// the task's current one, schedules the task's next run (see
/// sql/queries/finish_claim.sql).
pub fn finish_claim(client: &SpiClient<'_>, log_id: i64, status: &str, error: Option<&Text>) -> Finished {
    // Time zones came with the update to 0.4.0, the per-task run counters
    // with the update to 0.3.0.
    let statement = if crate::version::has_column(c"scheduled_tasks", c"schedule_timezone") {
        include_str!("../../sql/queries/finish_claim.sql")
    } else if crate::version::has_column(c"scheduled_tasks", c"runs_completed") {
        include_str!("../../sql/queries/finish_claim_0_3_0.sql")
    } else {
        include_str!("../../sql/queries/finish_claim_0_2_0.sql")
    };
    let stmt = plan(client, statement, &[types::INT8, types::TEXT, types::TEXT]);
    let current = client
        .select(&*stmt, None, &[log_id.into(), status.into(), error.into()])
        .and_then(first_value::<bool>)
        .or_raise();
    match current {
        None => Finished::NotRunning,
        Some(false) => Finished::Replaced,
        Some(true) => Finished::Current,
    }
}

fn my_last_claim_status(client: &SpiClient<'_>, task_id: i32) -> Option<String> {
    let stmt = plan(
        client,
        include_str!("../../sql/queries/my_last_claim_status.sql"),
        &[types::INT4, types::TIMESTAMPTZ],
    );
    client
        .select(&*stmt, None, &[task_id.into(), super::backend_start().into()])
        .and_then(first_value::<String>)
        .or_raise()
}

/// Why this session has no running claim of `task_id` to release.
fn raise_not_releasable(client: &SpiClient<'_>, task_id: i32) -> ! {
    if xact::released_in_this_transaction(task_id) {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("task {task_id} was already released in this transaction"),
        );
    }
    if holds_task_lock(task_id) {
        // The sweep revoked this claim (timed out) but could not end the
        // session: give the lock back so the task is not blocked forever.
        unlock_task(task_id);
        super::held::released(task_id);
        let status = my_last_claim_status(client, task_id).unwrap_or_else(|| "unknown".into());
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("the claim of task {task_id} held by this session was revoked (status {status})"),
            "The recovery sweep ended this run; its result was not recorded and the task lock has been released.",
        );
    }
    if !task_exists(client, task_id) {
        raise_unknown_task(task_id);
    }
    raise(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("task {task_id} is not claimed by this session"),
    );
}

/// `completed` or `failed`, the outcomes a holder may report.
pub(super) fn release_status(p_status: Option<Text>) -> &'static str {
    match required(p_status, "p_status") {
        s if s == "completed" => "completed",
        s if s == "failed" => "failed",
        s => raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("p_status must be 'completed' or 'failed', got \"{s}\""),
        ),
    }
}

/// Ends this session's claim of a task with `completed` or `failed`. The
/// task lock is dropped only when the transaction commits, after the log and
/// `next_run_at` changes are visible to the next claimant.
#[pg_extern]
fn release_task_lock(
    p_task_id: Option<i32>,
    p_worker_id: Option<Text>,
    p_status: Option<Text>,
    p_error_message: default!(Option<Text>, "NULL"),
) {
    let task_id = required(p_task_id, "p_task_id");
    let worker = text::name(p_worker_id, "p_worker_id");
    let status = release_status(p_status);
    crate::access::connect(|client| release_held(client, task_id, &worker, status, p_error_message.as_ref()));
}

/// Ends this session's claim of `task_id`, made by `worker`; 55000 when it
/// holds none (or another worker's).
pub(super) fn release_held(client: &SpiClient<'_>, task_id: i32, worker: &Text, status: &str, error: Option<&Text>) {
    let Some(held) = super::held::get(task_id) else {
        raise_not_releasable(client, task_id);
    };
    if !holds_task_lock(task_id) {
        // DISCARD ALL or pg_advisory_unlock_all() gave the lock up behind
        // pg_distlock's back: the claim is lost, and another worker may run
        // the task now. Nothing is recorded for it.
        super::held::lost(task_id);
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("this session no longer holds the lock of task {task_id}: its claim was lost"),
            "Something released the session's advisory locks (DISCARD ALL, pg_advisory_unlock_all()). \
             The run's result was not recorded; the task runs again when it is claimed next.",
        );
    }
    // A session that changed role (SET ROLE) is still the holder by
    // its lock, but acts only with the claiming role's rights.
    crate::access::require_holder(client, Some(held.role), || format!("the claim of task {task_id}"));
    if held.worker != *worker {
        raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("task {task_id} is claimed by worker \"{}\", not \"{worker}\"", held.worker),
        );
    }
    match finish_claim(client, held.log_id, status, error) {
        Finished::Current => {}
        Finished::NotRunning => raise_not_releasable(client, task_id),
        // The error undoes the log row's end too: the release changes nothing.
        Finished::Replaced => raise(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("the claim of task {task_id} held by this session is no longer the task's current claim"),
        ),
    }
    super::held::released(task_id);
    if holds_task_lock(task_id) {
        xact::release_at_commit(task_id);
    }
}
