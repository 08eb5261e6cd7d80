//! The job queue: enqueue, consume with leases, and settle (complete, fail,
//! extend). No session-level lock is used anywhere, so every function works
//! behind a transaction-pooling PgBouncer.

mod claim;
mod claim_start;
mod consume;
pub(crate) mod counters;
mod dead_jobs;
mod enqueue;
mod entries_read;
mod horizon;
mod limits;
mod passed_for_good;
mod payload;
mod place;
mod prepared;
mod reap;
mod retention;
mod settings;
mod settle;
mod settle_and_consume;
mod wake;
#[cfg(any(test, feature = "pg_test"))]
mod attempt_tests;
#[cfg(any(test, feature = "pg_test"))]
mod attempt_review_tests;
#[cfg(any(test, feature = "pg_test"))]
mod claim_start_tests;
#[cfg(any(test, feature = "pg_test"))]
mod dedup_tests;
#[cfg(any(test, feature = "pg_test"))]
mod group_tests;
#[cfg(any(test, feature = "pg_test"))]
mod plan_tests;
#[cfg(any(test, feature = "pg_test"))]
mod queue_tests;

pub use reap::reap_expired_leases;
pub(crate) use claim::without_queue;
pub(crate) use consume::{consume, route, Route, MAX_BATCH};
pub(crate) use enqueue::{enqueue, enqueue_task_in_group, enqueue_tasks_in_group};
pub(crate) use payload::{Payload, Payloads};
pub(crate) use settle_and_consume::settle_and_consume_tasks_with_queue;

use crate::text::{self, Text};
use pgrx::spi::SpiClient;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise, OrRaise};
use crate::plans::{first_value, plan};

/// The worker id to record: the argument, or else the session's
/// application_name, or else its client address.
fn resolve_worker(client: &SpiClient<'_>, p_worker_id: Option<Text>) -> Text {
    match p_worker_id {
        Some(worker) => text::checked_name(worker, "p_worker_id"),
        None => client
            .select(&*plan(client, include_str!("../../sql/queries/queue_default_worker.sql"), &[]), None, &[])
            .and_then(first_value::<Text>)
            .or_raise()
            .unwrap_or_else(|| "unknown".into()),
    }
}

/// Picks the statement for this database's tables: `archived` when completed
/// jobs move to distlock.completed_jobs (0.3.0), `in_place` for 0.2.0's
/// tables, which this library serves until ALTER EXTENSION UPDATE.
fn for_completions(archived: &'static str, in_place: &'static str) -> &'static str {
    if crate::version::table_oid(c"completed_jobs") != pgrx::pg_sys::InvalidOid {
        archived
    } else {
        in_place
    }
}

/// Picks the statement for this database's tables: `recorded` when ended
/// attempts are recorded in distlock.job_attempts (0.4.0), `unrecorded`
/// for older tables, which this library serves until ALTER EXTENSION UPDATE.
/// (The update that made job_attempts gave jobs their group_key: the
/// statements that carry a job's columns along name it only in `recorded`.)
fn for_attempts(recorded: &'static str, unrecorded: &'static str) -> &'static str {
    if attempts_recorded() {
        recorded
    } else {
        unrecorded
    }
}

/// Whether the tables are 0.4.0's: job_attempts exists (and jobs have their
/// group_key).
fn attempts_recorded() -> bool {
    crate::version::table_oid(c"job_attempts") != pgrx::pg_sys::InvalidOid
}

/// `p_lease` of a job claim or extension: positive and at most
/// `distlock.max_job_lease` (a day unless a superuser sets it), so that a
/// consumer that dies, or a tenant that means harm, cannot keep a job, or a
/// limited queue's slot, for years (22023 otherwise).
fn job_lease(p_lease: Option<pgrx::datum::Interval>) -> pgrx::datum::Interval {
    crate::errors::capped_interval(
        p_lease,
        "p_lease",
        crate::gucs::MAX_JOB_LEASE_SECONDS.get(),
        "distlock.max_job_lease",
        "Extend the lease with distlock.extend_task_lease while the job runs, or raise distlock.max_job_lease.",
    )
}

fn raise_unknown_job(job_id: i64) -> ! {
    raise(PgSqlErrorCode::ERRCODE_NO_DATA_FOUND, format!("job {job_id} does not exist"))
}
