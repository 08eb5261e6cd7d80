//! TTL leases with owner checks and fencing tokens.
//!
//! These functions are on the hot path of every heartbeat and fenced write,
//! so they do not pin search_path (a SET clause costs more than the work);
//! their SQL qualifies every table, function and operator instead.

use crate::scopes::{require, Capability};
use crate::text::{self, Text};
use pgrx::prelude::*;

use super::{checked_bool, first_bool, now, run, NAME_OWNER_NOW, NAME_OWNER_NOW_TTL, NAME_OWNER_NOW_TTL_ROLE};
use crate::access::caller;
use crate::errors::{require_primary, required};
use crate::plans::{first_value, types};

/// Takes lease `p_name` for `p_owner` for `p_ttl`, or renews it when
/// `p_owner` already holds it. Returns the fencing token (strictly
/// increasing per name, kept across renewals), or NULL when another owner
/// holds an unexpired lease.
#[pg_extern]
fn acquire_lease(p_name: Option<Text>, p_owner: Option<Text>, p_ttl: Option<Interval>) -> Option<i64> {
    let name = text::name(p_name, "p_name");
    let owner = text::name(p_owner, "p_owner");
    let ttl = super::hold_ttl(p_ttl);
    require_primary("take leases");
    require(Capability::Worker, "lease", &name);
    crate::lock_keys::lock_grants_until_commit(crate::lock_keys::LEASE_GRANT_CLASS, name.bytes(), || format!("lease \"{name}\""));
    crate::access::connect(|client| {
        run(
            client,
            include_str!("../../sql/queries/lease_acquire.sql"),
            &NAME_OWNER_NOW_TTL_ROLE,
            &[(&name).into(), (&owner).into(), now().into(), ttl.into(), caller().into()],
            first_value::<i64>,
        )
    })
}

/// Extends `p_owner`'s unexpired lease to `p_ttl` from now; false when it
/// does not hold it (any more).
#[pg_extern]
fn renew_lease(p_name: Option<Text>, p_owner: Option<Text>, p_ttl: Option<Interval>) -> bool {
    let name = text::name(p_name, "p_name");
    let owner = text::name(p_owner, "p_owner");
    let ttl = super::hold_ttl(p_ttl);
    require_primary("renew leases");
    require(Capability::Worker, "lease", &name);
    crate::access::connect(|client| {
        run(
            client,
            include_str!("../../sql/queries/lease_renew.sql"),
            &NAME_OWNER_NOW_TTL,
            &[(&name).into(), (&owner).into(), now().into(), ttl.into()],
            |rows| checked_bool(client, rows, || format!("lease \"{name}\"")),
        )
    })
}

/// Releases `p_owner`'s lease; true when it still held it. Never touches
/// another owner's lease.
#[pg_extern]
fn release_lease(p_name: Option<Text>, p_owner: Option<Text>) -> bool {
    let name = text::name(p_name, "p_name");
    let owner = text::name(p_owner, "p_owner");
    require(Capability::Worker, "lease", &name);
    crate::access::connect(|client| {
        run(
            client,
            include_str!("../../sql/queries/lease_release.sql"),
            &NAME_OWNER_NOW,
            &[(&name).into(), (&owner).into(), now().into()],
            |rows| checked_bool(client, rows, || format!("lease \"{name}\"")),
        )
    })
}

/// Releases lease `p_name` whoever holds it (for administrators); true when
/// it was held.
#[pg_extern]
fn force_release_lease(p_name: Option<Text>) -> bool {
    let name = text::name(p_name, "p_name");
    crate::access::connect(|client| {
        run(
            client,
            include_str!("../../sql/queries/lease_force_release.sql"),
            &[types::TEXT, types::TIMESTAMPTZ],
            &[(&name).into(), now().into()],
            first_bool,
        )
    })
}

/// True only for the token of the current, unexpired holder of `p_name`:
/// call it from a trigger or CHECK to refuse writes from a stale holder.
#[pg_extern(stable)]
fn check_lease_token(p_name: Option<Text>, p_token: Option<i64>) -> bool {
    let name = text::name(p_name, "p_name");
    let token = required(p_token, "p_token");
    require(Capability::Worker, "lease", &name);
    crate::access::connect(|client| {
        run(
            client,
            include_str!("../../sql/queries/lease_check.sql"),
            &[types::TEXT, types::INT8, types::TIMESTAMPTZ],
            &[(&name).into(), token.into(), now().into()],
            first_bool,
        )
    })
}
