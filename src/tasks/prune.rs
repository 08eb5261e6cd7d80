//! Keeping the execution log small.

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise, required};
use crate::plans::{plan, types};

/// Deletes finished log rows that completed more than `p_older_than` ago;
/// returns how many. Running claims are never deleted.
#[pg_extern]
#[search_path(pg_catalog, pg_temp)]
fn prune_execution_log(p_older_than: Option<Interval>) -> i64 {
    let older_than = required(p_older_than, "p_older_than");
    if crate::errors::interval_micros(&older_than) < 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("p_older_than must not be negative, got {older_than}"),
        );
    }
    Spi::connect_mut(|client| {
        let stmt = plan(client, include_str!("../../sql/queries/prune_log.sql"), &[types::INTERVAL]);
        client
            .update(&*stmt, None, &[older_than.into()])
            .map(|deleted| deleted.len() as i64)
            .unwrap_or_else(|e| raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, e.to_string()))
    })
}
