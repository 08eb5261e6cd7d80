//! Deleting expired leases, leaderships and semaphore slots. An expired row
//! is already free to take; it is kept a while only so the views can show
//! who held what last.

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::errors::{retention_interval, OrRaise};
use crate::plans::{delete_older_than, plan, types};

/// Semaphores left without holders. Two statements: the first locks them
/// (an acquirer locks the same row before adding a holder), the second
/// deletes them on a newer snapshot, so a holder added just before is seen.
fn delete_idle_semaphores(client: &mut SpiClient<'_>) -> i64 {
    let lock = plan(client, include_str!("../../sql/queries/sem_idle_lock.sql"), &[]);
    let idle: Vec<crate::text::Text> = client
        .update(&*lock, None, &[])
        .and_then(|rows| rows.map(|row| row.get(1).map(Option::unwrap_or_default)).collect())
        .or_raise();
    if idle.is_empty() {
        return 0;
    }
    let delete = plan(client, include_str!("../../sql/queries/sem_idle_delete.sql"), &[types::TEXT_ARRAY]);
    client.update(&*delete, None, &[idle.into()]).map(|deleted| deleted.len() as i64).or_raise()
}

/// Deletes leases, leaderships and semaphore slots that expired more than
/// `p_older_than` ago, and semaphores left without holders; returns how
/// many rows. Tokens and terms come from a sequence, so later holders
/// still get larger ones.
#[pg_extern]
fn prune_leases(p_older_than: default!(Option<Interval>, "'1 day'")) -> i64 {
    let older_than = retention_interval(p_older_than, "p_older_than");
    crate::access::connect_mut(|client| {
        delete_older_than(client, include_str!("../../sql/queries/lease_prune.sql"), older_than)
            + delete_older_than(client, include_str!("../../sql/queries/leader_prune.sql"), older_than)
            + delete_older_than(client, include_str!("../../sql/queries/sem_holders_prune.sql"), older_than)
            + delete_idle_semaphores(client)
    })
}
