//! Keeping the queue small: finished jobs are deleted after a retention.

use pgrx::prelude::*;

use crate::errors::retention_interval;
use crate::plans::delete_older_than;

/// Deletes completed and dead jobs that finished more than `p_older_than`
/// ago; returns how many. Jobs still to run or running are never deleted.
#[pg_extern]
fn prune_jobs(p_older_than: default!(Option<Interval>, "'7 days'")) -> i64 {
    let older_than = retention_interval(p_older_than, "p_older_than");
    let statement = super::for_completions(
        super::for_attempts(
            include_str!("../../sql/queries/queue_prune.sql"),
            include_str!("../../sql/queries/queue_prune_0_3_0.sql"),
        ),
        include_str!("../../sql/queries/queue_prune_0_2_0.sql"),
    );
    crate::access::connect_mut(|client| delete_older_than(client, statement, older_than))
}
