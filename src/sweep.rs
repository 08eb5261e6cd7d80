//! The recovery sweep: ends claims whose holder is gone or whose lease ran
//! out (abandoned), or that have run past their timeout (timed_out; a
//! session claim's backend is terminated, because no other session can
//! release a session-level advisory lock, a lease-mode claim's token is
//! revoked).

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise, require_primary, required, OrRaise};
use crate::plans::{plan, types};
use crate::tasks::finish_claim;
use crate::text::Text;
use crate::xact;

struct RunningClaim {
    log_id: i64,
    task_id: i32,
    worker_id: Text,
    holder_pid: i32,
    holder_alive: bool,
    overdue: bool,
    timeout: String,
    /// A lease-mode claim: no backend holds a lock for it.
    leased: bool,
}

fn lock_running_claims(client: &SpiClient<'_>) -> Vec<i64> {
    let stmt = plan(client, include_str!("../sql/queries/lock_running_claims.sql"), &[]);
    client
        .select(&*stmt, None, &[])
        .and_then(|rows| rows.map(|row| row.get::<i64>(1).map(Option::unwrap_or_default)).collect())
        .or_raise()
}

fn assess(client: &SpiClient<'_>, log_ids: Vec<i64>, timeout_minutes: i32) -> Vec<RunningClaim> {
    let stmt = plan(
        client,
        include_str!("../sql/queries/assess_claims.sql"),
        &[types::INT8_ARRAY, types::INT4],
    );
    client
        .select(&*stmt, None, &[log_ids.into(), timeout_minutes.into()])
        .and_then(|rows| {
            rows.map(|row| {
                Ok(RunningClaim {
                    log_id: row.get(1)?.unwrap_or_default(),
                    task_id: row.get(2)?.unwrap_or_default(),
                    worker_id: row.get(3)?.unwrap_or_default(),
                    holder_pid: row.get(4)?.unwrap_or_default(),
                    holder_alive: row.get(5)?.unwrap_or_default(),
                    overdue: row.get(6)?.unwrap_or_default(),
                    timeout: row.get(7)?.unwrap_or_default(),
                    leased: row.get(8)?.unwrap_or_default(),
                })
            })
            .collect()
        })
        .or_raise()
}

fn holder_holds_lock(client: &SpiClient<'_>, task_id: i32, pid: i32) -> bool {
    let stmt = plan(
        client,
        include_str!("../sql/queries/holder_holds_lock.sql"),
        &[types::INT4, types::INT4],
    );
    client
        .select(&*stmt, None, &[task_id.into(), pid.into()])
        .and_then(|rows| rows.first().get_one::<bool>())
        .or_raise()
        .unwrap_or(false)
}

/// Mirrors pg_terminate_backend's permission rule for the owner the sweep
/// runs as, so a backend it may not signal is reported instead of aborting
/// the whole sweep; a superuser's backend is ended only for a superuser caller.
fn may_terminate(pid: i32) -> bool {
    unsafe {
        let proc_ = pg_sys::BackendPidGetProc(pid);
        if proc_.is_null() {
            return false;
        }
        // Only client backends: a background worker (pg_cron's job runner,
        // a parallel worker, another extension's worker) or an auxiliary
        // process has no client to retry, and a roleless one no owner whose
        // rights the caller could be checked against.
        let role = (*proc_).roleId;
        if !crate::pg_compat::is_client_backend(proc_) || role == pg_sys::InvalidOid {
            return false;
        }
        if pg_sys::superuser_arg(role) && !pg_sys::superuser_arg(crate::access::caller()) {
            return false;
        }
        let me = pg_sys::GetUserId();
        pg_sys::has_privs_of_role(me, role)
            || pg_sys::has_privs_of_role(me, pg_sys::Oid::from(pg_sys::ROLE_PG_SIGNAL_BACKEND))
    }
}

/// Frees a timed-out claim's lock; true when its holder no longer has it.
fn free_lock_of(client: &SpiClient<'_>, claim: &RunningClaim) -> bool {
    if claim.holder_pid == unsafe { pg_sys::MyProcPid } {
        // The sweep runs in the holder's own session: drop the lock at commit.
        xact::release_at_commit(claim.task_id);
        crate::tasks::forget_held_claim(claim.task_id);
        return true;
    }
    terminate_holder(client, claim.task_id, claim.holder_pid)
}

/// Ends backend `pid`, which holds task `task_id`'s lock (no other session
/// can release a session-level lock); true when it no longer holds it.
fn terminate_holder(client: &SpiClient<'_>, task_id: i32, pid: i32) -> bool {
    if !may_terminate(pid) {
        ereport!(
            WARNING,
            PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
            format!(
                "pg_distlock sweep may not terminate backend {} holding task {}; its lock stays held",
                pid, task_id
            )
        );
        return !holder_holds_lock(client, task_id, pid);
    }
    let stmt = plan(client, include_str!("../sql/queries/terminate_backend.sql"), &[types::INT4]);
    client.select(&*stmt, None, &[pid.into()]).or_raise();
    !holder_holds_lock(client, task_id, pid)
}

/// Terminates holders of task locks whose claim was made in a transaction
/// that has stayed open past the task's timeout: its log row was never
/// committed, so nothing else shows the claim, and only ending the session
/// gives the task back. The claim rolls back, so the due slot runs again.
fn end_uncommitted_claims(client: &SpiClient<'_>, timeout_minutes: i32) -> Vec<(i32, Text, bool)> {
    let stmt = plan(client, include_str!("../sql/queries/stale_uncommitted_claims.sql"), &[types::INT4]);
    let stale: Vec<(i32, i32, Text, Text)> = four_columns(client.select(&*stmt, None, &[timeout_minutes.into()]));
    let me = unsafe { pg_sys::MyProcPid };
    stale
        .into_iter()
        .filter(|(_, pid, _, _)| *pid != me)
        .map(|(task_id, pid, holder, timeout)| {
            let released = warn_and_terminate(
                client,
                task_id,
                pid,
                format!(
                    "pg_distlock sweep: backend {pid} ({holder}) has held the lock of task {task_id} in a \
                     transaction open longer than {timeout} with no committed claim; terminating it"
                ),
            );
            (task_id, holder, released)
        })
        .collect()
}

/// The rows of a four-column statement, NULLs read as defaults.
fn four_columns<A, B, C, D>(rows: pgrx::spi::SpiResult<pgrx::spi::SpiTupleTable<'_>>) -> Vec<(A, B, C, D)>
where
    A: FromDatum + IntoDatum + Default,
    B: FromDatum + IntoDatum + Default,
    C: FromDatum + IntoDatum + Default,
    D: FromDatum + IntoDatum + Default,
{
    rows.and_then(|rows| {
        rows.map(|row| {
            Ok((
                row.get(1)?.unwrap_or_default(),
                row.get(2)?.unwrap_or_default(),
                row.get(3)?.unwrap_or_default(),
                row.get(4)?.unwrap_or_default(),
            ))
        })
        .collect()
    })
    .or_raise()
}

/// Warns `message`, then ends backend `pid`, which holds task `task_id`'s
/// lock; true when it no longer holds it.
fn warn_and_terminate(client: &SpiClient<'_>, task_id: i32, pid: i32, message: String) -> bool {
    ereport!(WARNING, PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE, message);
    terminate_holder(client, task_id, pid)
}

/// Terminates the holders of overdue claims the sweep could not lock because
/// the holder itself keeps the log row locked in a transaction left open
/// (overdue_locked_claims.sql); returns those claims' log ids, which the
/// sweep then locks and times out like any other.
fn end_evading_holders(client: &SpiClient<'_>, locked: &[i64], timeout_minutes: i32) -> Vec<i64> {
    let stmt = plan(
        client,
        include_str!("../sql/queries/overdue_locked_claims.sql"),
        &[types::INT8_ARRAY, types::INT4],
    );
    let evading: Vec<(i64, i32, i32, Text)> =
        four_columns(client.select(&*stmt, None, &[locked.to_vec().into(), timeout_minutes.into()]));
    let me = unsafe { pg_sys::MyProcPid };
    evading
        .into_iter()
        .filter(|(_, _, pid, _)| *pid != me)
        .filter_map(|(log_id, task_id, pid, timeout)| {
            warn_and_terminate(
                client,
                task_id,
                pid,
                format!(
                    "pg_distlock sweep: backend {pid} has run task {task_id} longer than {timeout} and keeps its \
                     claim locked in a transaction open as long; terminating it"
                ),
            )
            .then_some(log_id)
        })
        .collect()
}

/// Notes that the sweep ran, for `distlock.sweep_status` and the monitors
/// that alert when it stops running (not on 0.2.0's tables, which have no
/// place for it until ALTER EXTENSION UPDATE).
fn record_run(client: &SpiClient<'_>, recovered: usize) {
    if crate::version::table_oid(c"sweep_state") == pg_sys::InvalidOid {
        return;
    }
    let stmt = plan(client, include_str!("../sql/queries/sweep_record.sql"), &[types::INT4]);
    let recovered = i32::try_from(recovered).unwrap_or(i32::MAX);
    client.select(&*stmt, None, &[recovered.into()]).map(|_| ()).or_raise();
}

/// Recovers running claims whose holder backend is gone (`abandoned`) or
/// that ran longer than their task's timeout, or `p_timeout_minutes` when
/// the task has none (`timed_out`; the holder backend is terminated), and
/// claims left uncommitted in a transaction open longer than that (the
/// holder is terminated; the claim rolls back).
/// Also returns expired job-queue leases to the queue and deletes expired
/// table-mode rate-limit state.
/// Safe to run concurrently and often, e.g. every minute from pg_cron.
#[pg_extern]
fn check_and_recover_timeout_tasks(
    p_timeout_minutes: default!(Option<i32>, 30),
) -> TableIterator<
    'static,
    (name!(task_id, i32), name!(worker_id, Text), name!(lock_released, bool)),
> {
    require_primary("recover tasks");
    let timeout_minutes = required(p_timeout_minutes, "p_timeout_minutes");
    if timeout_minutes <= 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("p_timeout_minutes must be positive, got {timeout_minutes}"),
        );
    }
    let recovered = crate::access::connect(|client| {
        // Expired job leases are reclaimable anyway; tidying them here keeps
        // queue_stats truthful when no consumer is polling.
        crate::queue::reap_expired_leases(client, 10_000);
        crate::ratelimit::prune_expired(client);
        let mut recovered = end_uncommitted_claims(client, timeout_minutes);
        let mut locked = lock_running_claims(client);
        let evaded = end_evading_holders(client, &locked, timeout_minutes);
        if !evaded.is_empty() {
            // Their holders are gone, and with them the row locks.
            locked = lock_running_claims(client);
        }
        let claims = if locked.is_empty() { Vec::new() } else { assess(client, locked, timeout_minutes) };
        for claim in claims {
            let lock_released = if evaded.contains(&claim.log_id) {
                let reason = format!(
                    "ran longer than {} and kept its claim locked in a transaction open as long; holder backend {} terminated",
                    claim.timeout, claim.holder_pid
                );
                finish_claim(client, claim.log_id, "timed_out", Some(&Text::from(reason.as_str())));
                true
            } else if !claim.holder_alive && claim.leased {
                finish_claim(client, claim.log_id, "abandoned", Some(&Text::from("its lease ran out")));
                true
            } else if !claim.holder_alive {
                let reason = format!("holder backend {} is gone", claim.holder_pid);
                finish_claim(client, claim.log_id, "abandoned", Some(&Text::from(reason.as_str())));
                !holder_holds_lock(client, claim.task_id, claim.holder_pid)
            } else if claim.overdue && claim.leased {
                // Revoking the token is enough: the holder's next renewal,
                // release or fenced write is refused.
                let reason = format!("ran longer than {}; its lease was revoked", claim.timeout);
                finish_claim(client, claim.log_id, "timed_out", Some(&Text::from(reason.as_str())));
                true
            } else if claim.overdue {
                let reason = format!(
                    "ran longer than {}; holder backend {} terminated",
                    claim.timeout, claim.holder_pid
                );
                finish_claim(client, claim.log_id, "timed_out", Some(&Text::from(reason.as_str())));
                free_lock_of(client, &claim)
            } else {
                continue;
            };
            recovered.push((claim.task_id, claim.worker_id, lock_released));
        }
        record_run(client, recovered.len());
        recovered
    });
    TableIterator::new(recovered)
}
