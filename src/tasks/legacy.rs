//! Claims made by 0.2.0's library, which locks tasks with the legacy tag
//! that SQL can also reach (see lock_keys.rs). Every claim takes the legacy
//! tag beside the reserved one when it is free, so an old library cannot
//! claim the task beside it; a busy legacy tag stops a claim only when a
//! live running claim holds it, so that a session squatting on the key with
//! pg_advisory_lock(int, int) blocks nothing.

use pgrx::spi::SpiClient;

use crate::errors::OrRaise;
use crate::lock_keys::{try_lock_legacy_task, TryLock};
use crate::plans::{first_value, plan, types};

/// Takes task `task_id`'s legacy tag for the session (or the transaction)
/// when it is free; false when a live claim of an older library holds it.
pub fn may_claim(client: &SpiClient<'_>, task_id: i32, session: bool) -> bool {
    match try_lock_legacy_task(task_id, session) {
        TryLock::Busy => !older_claim_alive(client, task_id),
        TryLock::Acquired | TryLock::AlreadyHeld => true,
    }
}

fn older_claim_alive(client: &SpiClient<'_>, task_id: i32) -> bool {
    let stmt = plan(client, include_str!("../../sql/queries/legacy_claim_alive.sql"), &[types::INT4]);
    client
        .select(&*stmt, None, &[task_id.into()])
        .and_then(first_value::<bool>)
        .or_raise()
        .unwrap_or(false)
}
