//! Lease-mode claims: the claim is the task row's lease (an expiry and the
//! fencing token), not a session lock, so it is renewed and released by
//! token from any connection: through a transaction-pooling PgBouncer, after
//! a reconnect, or on a promoted standby. A lease that runs out is
//! superseded by the next claim and recovered by the sweep.

use crate::text::{self, Text};
use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::PgSqlErrorCode;

use super::claim::{raise_unknown_task, task_exists, Claim, Mode};
use super::release::{finish_claim, release_status, Finished};
use crate::errors::{forward_interval, raise_with_hint, require_primary, required, OrRaise};
use crate::lock_keys::{try_lock_task_for_transaction, unlock_task_for_transaction, TryLock};
use crate::plans::{first_two, plan, types};

/// Claims `task_id` for `worker` for `lease`. The task's lock is held only
/// while this transaction writes the claim, which keeps it from overlapping a
/// live session claim; the lease itself lives in the task row.
/// With `due` (what a fetch read of it), only while it is due, once the
/// missed slots its policy skips are skipped.
pub fn claim(
    client: &SpiClient<'_>,
    task_id: i32,
    worker: &Text,
    due: Option<(&super::missed::Pending, &mut super::missed::Budget)>,
    lease: Interval,
) -> Claim {
    let only_if_due = due.is_some();
    match try_lock_task_for_transaction(task_id) {
        TryLock::Busy => return Claim::Busy,
        TryLock::AlreadyHeld => return Claim::AlreadyHeldHere,
        TryLock::Acquired => {}
    }
    if !super::legacy::may_claim(client, task_id, false) {
        unlock_task_for_transaction(task_id);
        return Claim::Busy;
    }
    if let Some((pending, budget)) = due {
        if super::missed::skip_missed(client, task_id, pending, budget, worker) == super::missed::Outcome::PassOver {
            unlock_task_for_transaction(task_id);
            return Claim::Busy;
        }
    }
    let mut arguments: Vec<pgrx::datum::DatumWithOid> =
        vec![task_id.into(), only_if_due.into(), worker.into(), lease.into(), crate::access::caller().into()];
    let stmt = if records_lease_backends() {
        arguments.extend(this_backend());
        plan(
            client,
            include_str!("../../sql/queries/claim_task_lease.sql"),
            &[types::INT4, types::BOOL, types::TEXT, types::INTERVAL, types::OID, types::INT4, types::TIMESTAMPTZ],
        )
    } else {
        plan(
            client,
            include_str!("../../sql/queries/claim_task_lease_0_3_0.sql"),
            &[types::INT4, types::BOOL, types::TEXT, types::INTERVAL, types::OID],
        )
    };
    let claimed = client
        .select(&*stmt, None, &arguments)
        .and_then(|rows| {
            if rows.is_empty() {
                return Ok(None);
            }
            let row = rows.first();
            Ok(Some((row.get::<i64>(2)?, row.get::<i64>(3)?.unwrap_or(0))))
        })
        .or_raise();
    match claimed {
        Some((Some(fencing_token), superseded)) => {
            count_abandoned(client, task_id, superseded);
            Claim::Claimed { fencing_token }
        }
        _ => {
            unlock_task_for_transaction(task_id);
            Claim::NotEligible
        }
    }
}

/// Whether the installed SQL records the backend that made or renewed a
/// lease-mode claim in the task row (from 0.4.0 on).
fn records_lease_backends() -> bool {
    crate::version::has_column(c"scheduled_tasks", c"lease_backend_pid")
}

/// This backend as a claim records it: its pid and start time.
fn this_backend() -> [pgrx::datum::DatumWithOid<'static>; 2] {
    [unsafe { pgrx::pg_sys::MyProcPid }.into(), super::backend_start().into()]
}

/// Counts `superseded` runs of `task_id` as abandoned (the run counters
/// came with the update to 0.3.0).
fn count_abandoned(client: &SpiClient<'_>, task_id: i32, superseded: i64) {
    if superseded == 0 || !crate::version::has_column(c"scheduled_tasks", c"runs_abandoned") {
        return;
    }
    let stmt = plan(client, include_str!("../../sql/queries/task_count_abandoned.sql"), &[types::INT4, types::INT8]);
    client.select(&*stmt, None, &[task_id.into(), superseded.into()]).or_raise();
}

fn raise_lease_lost(task_id: i32, token: i64) -> ! {
    raise_with_hint(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("task {task_id} has no live lease-mode claim with token {token}"),
        "Its lease ran out, it was released or recovered, or another claim took over: stop the work; \
         its result must not be recorded.",
    )
}

/// Claims one task now, due or not, in lease mode. Returns the claim's
/// fencing token, or NULL when another claim is live or the task is
/// disabled.
#[pg_extern]
fn try_acquire_task_lease(p_task_id: Option<i32>, p_worker_id: Option<Text>, p_lease: Option<Interval>) -> Option<i64> {
    require_primary("claim tasks");
    let task_id = required(p_task_id, "p_task_id");
    let worker = text::name(p_worker_id, "p_worker_id");
    let lease = forward_interval(p_lease, "p_lease");
    crate::access::connect(|client| {
        crate::scopes::require_task(client, task_id);
        match claim(client, task_id, &worker, None, lease) {
            Claim::Claimed { fencing_token } => Some(fencing_token),
            Claim::NotEligible if !task_exists(client, task_id) => raise_unknown_task(task_id),
            Claim::NotEligible | Claim::Busy | Claim::AlreadyHeldHere => None,
        }
    })
}

/// Extends the lease of the claim with `p_fencing_token` to `p_lease` from
/// now and returns when it ends; 55000 once the claim is no longer live.
#[pg_extern]
fn renew_task_lease(
    p_task_id: Option<i32>,
    p_fencing_token: Option<i64>,
    p_lease: Option<Interval>,
) -> TimestampWithTimeZone {
    require_primary("renew task leases");
    let task_id = required(p_task_id, "p_task_id");
    let token = required(p_fencing_token, "p_fencing_token");
    let lease = forward_interval(p_lease, "p_lease");
    crate::access::connect(|client| {
        // Before anything is read: the answer must not depend on the token.
        crate::scopes::require_task(client, task_id);
        let mut arguments: Vec<pgrx::datum::DatumWithOid> = vec![task_id.into(), token.into(), lease.into()];
        let stmt = if records_lease_backends() {
            arguments.extend(this_backend());
            plan(
                client,
                include_str!("../../sql/queries/task_lease_renew.sql"),
                &[types::INT4, types::INT8, types::INTERVAL, types::INT4, types::TIMESTAMPTZ],
            )
        } else {
            plan(
                client,
                include_str!("../../sql/queries/task_lease_renew_0_3_0.sql"),
                &[types::INT4, types::INT8, types::INTERVAL],
            )
        };
        let renewed = client
            .select(&*stmt, None, &arguments)
            .and_then(first_two::<TimestampWithTimeZone, pgrx::pg_sys::Oid>)
            .or_raise();
        match renewed {
            Some((Some(expires_at), role)) => {
                crate::access::require_holder(client, role, || format!("the claim of task {task_id}"));
                expires_at
            }
            _ if !task_exists(client, task_id) => raise_unknown_task(task_id),
            _ => raise_lease_lost(task_id, token),
        }
    })
}

/// Ends the lease-mode claim with `p_fencing_token` as `completed` or
/// `failed`, from any connection; 55000 once the claim is no longer live
/// (nothing is recorded then).
#[pg_extern]
fn release_task_lease(
    p_task_id: Option<i32>,
    p_fencing_token: Option<i64>,
    p_status: Option<Text>,
    p_error_message: default!(Option<Text>, "NULL"),
) {
    require_primary("release task leases");
    let task_id = required(p_task_id, "p_task_id");
    let token = required(p_fencing_token, "p_fencing_token");
    let status = release_status(p_status);
    crate::access::connect(|client| release_by_token(client, task_id, token, status, p_error_message.as_ref()));
}

/// Ends the lease-mode claim of `task_id` with `token`, as its holder's role
/// (or an admin); 55000 once it is no longer live.
pub(super) fn release_by_token(client: &SpiClient<'_>, task_id: i32, token: i64, status: &str, error: Option<&Text>) {
    // Before anything is read: the answer must not depend on the token.
    crate::scopes::require_task(client, task_id);
    let stmt = plan(
        client,
        include_str!("../../sql/queries/task_lease_holder.sql"),
        &[types::INT4, types::INT8],
    );
    let holder = client
        .select(&*stmt, None, &[task_id.into(), token.into()])
        .and_then(first_two::<i64, pgrx::pg_sys::Oid>)
        .or_raise();
    let (log_id, role) = match holder {
        Some((Some(log_id), role)) => (log_id, role),
        _ if !task_exists(client, task_id) => raise_unknown_task(task_id),
        _ => raise_lease_lost(task_id, token),
    };
    crate::access::require_holder(client, role, || format!("the claim of task {task_id}"));
    if finish_claim(client, log_id, status, error) != Finished::Current {
        raise_lease_lost(task_id, token);
    }
}

/// The fetch functions' lease mode, for their overloads in fetch.rs.
pub fn mode(p_lease: Option<Interval>) -> Mode {
    Mode::Lease(forward_interval(p_lease, "p_lease"))
}
