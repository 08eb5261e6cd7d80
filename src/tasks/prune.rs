//! Keeping the execution log small.

use pgrx::prelude::*;

use crate::errors::retention_interval;
use crate::plans::delete_older_than;

/// Deletes finished log rows that completed more than `p_older_than` ago;
/// returns how many. Running claims are never deleted.
#[pg_extern]
fn prune_execution_log(p_older_than: Option<Interval>) -> i64 {
    let older_than = retention_interval(p_older_than, "p_older_than");
    crate::access::connect_mut(|client| delete_older_than(client, include_str!("../../sql/queries/prune_log.sql"), older_than))
}
