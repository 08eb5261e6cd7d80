//! The job queue: enqueue, consume with leases, and settle (complete, fail,
//! extend). No session-level lock is used anywhere, so every function works
//! behind a transaction-pooling PgBouncer.

mod consume;
mod enqueue;
mod payload;
mod settle;
#[cfg(any(test, feature = "pg_test"))]
mod queue_tests;

pub use consume::reap_expired_leases;

use pgrx::spi::SpiClient;
use pgrx::PgSqlErrorCode;

use crate::errors::raise;
use crate::plans::first_value;

/// Longest worker id the table stores (task_queue.worker_id is varchar(50)).
const MAX_WORKER_ID: usize = 50;

/// The worker id to record: the argument, or else the session's
/// application_name, or else its client address.
fn resolve_worker(client: &SpiClient<'_>, p_worker_id: Option<&str>) -> String {
    match p_worker_id {
        Some(worker) => {
            if worker.trim().is_empty() {
                raise(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("p_worker_id must not be empty, got \"{worker}\""),
                );
            }
            if worker.chars().count() > MAX_WORKER_ID {
                raise(
                    PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                    format!("p_worker_id must be at most {MAX_WORKER_ID} characters, got \"{worker}\""),
                );
            }
            worker.to_string()
        }
        None => client
            .select(
                "SELECT pg_catalog.left(COALESCE(NULLIF(pg_catalog.current_setting('application_name'), ''), \
                 pg_catalog.host(pg_catalog.inet_client_addr()), \
                 'pid-' || pg_catalog.pg_backend_pid()), 50)",
                None,
                &[],
            )
            .and_then(first_value::<String>)
            .unwrap_or_else(|e| raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, e.to_string()))
            .unwrap_or_else(|| "unknown".into()),
    }
}

fn raise_unknown_job(job_id: i64) -> ! {
    raise(PgSqlErrorCode::ERRCODE_NO_DATA_FOUND, format!("job {job_id} does not exist"))
}
