//! N-holder leases.

use crate::scopes::{require, Capability};
use crate::text::{self, Text};
use pgrx::prelude::*;

use super::{checked_bool, now, run, NAME_OWNER_NOW, NAME_OWNER_NOW_TTL_ROLE};
use crate::access::caller;
use crate::errors::{int_in_range, raise_with_hint, require_primary};
use pgrx::PgSqlErrorCode;
use crate::plans::types;

/// Takes (or renews) one of `p_max` places of semaphore `p_name` for
/// `p_owner` for `p_ttl`; false when all places are held by others. The
/// limit is one value for all holders: another `p_max` while slots are held
/// is refused with 22023.
#[pg_extern]
fn acquire_semaphore(
    p_name: Option<Text>,
    p_max: Option<i32>,
    p_owner: Option<Text>,
    p_ttl: Option<Interval>,
) -> bool {
    let name = text::name(p_name, "p_name");
    let max = int_in_range(p_max, "p_max", 1..=i32::MAX);
    let owner = text::name(p_owner, "p_owner");
    let ttl = super::hold_ttl(p_ttl);
    require_primary("take semaphores");
    require(Capability::Worker, "semaphore", &name);
    let at = now();
    crate::access::connect(|client| {
        // Acquirers of one semaphore queue on its row from here to commit.
        run(
            client,
            include_str!("../../sql/queries/sem_lock.sql"),
            &[types::TEXT, types::INT4],
            &[(&name).into(), max.into()],
            |_| Ok(()),
        );
        let limit = run(
            client,
            include_str!("../../sql/queries/sem_expire.sql"),
            &[types::TEXT, types::INT4, types::TIMESTAMPTZ],
            &[(&name).into(), max.into(), at.into()],
            crate::plans::first_value::<i32>,
        );
        if limit.is_some_and(|limit| limit != max) {
            raise_with_hint(
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!(
                    "semaphore \"{name}\" has a limit of {} while its slots are held, got p_max {max}",
                    limit.unwrap_or_default()
                ),
                "Every holder of a semaphore passes the same p_max; it can change once no slot is held.",
            );
        }
        let renewed = run(
            client,
            include_str!("../../sql/queries/sem_renew.sql"),
            &NAME_OWNER_NOW_TTL_ROLE,
            &[(&name).into(), (&owner).into(), at.into(), ttl.into(), caller().into()],
            |rows| Ok(!rows.is_empty()),
        );
        renewed
            || run(
                client,
                include_str!("../../sql/queries/sem_take.sql"),
                &[types::TEXT, types::TEXT, types::TIMESTAMPTZ, types::INTERVAL, types::INT8, types::OID],
                &[(&name).into(), (&owner).into(), at.into(), ttl.into(), (max as i64).into(), caller().into()],
                |rows| Ok(!rows.is_empty()),
            )
    })
}

/// Gives back `p_owner`'s place in semaphore `p_name`; true when it held one.
#[pg_extern]
fn release_semaphore(p_name: Option<Text>, p_owner: Option<Text>) -> bool {
    let name = text::name(p_name, "p_name");
    let owner = text::name(p_owner, "p_owner");
    require(Capability::Worker, "semaphore", &name);
    crate::access::connect(|client| {
        run(
            client,
            include_str!("../../sql/queries/sem_release.sql"),
            &NAME_OWNER_NOW,
            &[(&name).into(), (&owner).into(), now().into()],
            |rows| checked_bool(client, rows, || format!("a slot of semaphore \"{name}\"")),
        )
    })
}
