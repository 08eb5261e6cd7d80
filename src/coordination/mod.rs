//! Leases, semaphores and leader election: rows with an owner and an
//! expiry, never session locks, so they survive connection pooling and
//! failover. Every function here takes its time from the server's clock.

mod election;
mod leases;
mod retention;
mod semaphore;
#[cfg(any(test, feature = "pg_test"))]
mod coordination_tests;

use pgrx::prelude::*;
use pgrx::spi::{SpiClient, SpiTupleTable};

use crate::errors::OrRaise;
use crate::plans::{plan, types};

/// `p_ttl` of a lease, a semaphore slot or a leadership: positive and at
/// most `distlock.max_hold_ttl`, so that a holder that dies cannot keep a
/// name for years (22023 otherwise).
fn hold_ttl(p_ttl: Option<pgrx::datum::Interval>) -> pgrx::datum::Interval {
    crate::errors::capped_interval(
        p_ttl,
        "p_ttl",
        crate::gucs::MAX_HOLD_TTL_SECONDS.get(),
        "distlock.max_hold_ttl",
        "Renew a hold before it runs out instead, or raise distlock.max_hold_ttl.",
    )
}

fn now() -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(unsafe { pgrx::pg_sys::GetCurrentTimestamp() })
        .unwrap_or_else(|_| TimestampWithTimeZone::positive_infinity())
}

/// Runs a kept statement whose arguments are (name, owner, now, ...); the
/// type list says which.
fn run<'c, R>(
    client: &SpiClient<'c>,
    sql: &'static str,
    arg_types: &[pgrx::pg_sys::PgOid],
    args: &[pgrx::datum::DatumWithOid<'_>],
    read: impl FnOnce(SpiTupleTable<'c>) -> pgrx::spi::SpiResult<R>,
) -> R {
    let stmt = plan(client, sql, arg_types);
    let _bounded = crate::lock_wait::bounded_waits();
    client
        .select(&*stmt, None, args)
        .and_then(read)
        .or_raise()
}

/// The first column of the first row as a bool (false without a row).
/// The first row's boolean, after checking that the caller may act on the
/// hold (second column: the role that took it). An ERROR here undoes the
/// statement that produced the row.
fn checked_bool(
    client: &SpiClient<'_>,
    rows: SpiTupleTable<'_>,
    what: impl FnOnce() -> String,
) -> pgrx::spi::SpiResult<bool> {
    if rows.is_empty() {
        return Ok(false);
    }
    let (value, holder) = rows.first().get_two::<bool, pgrx::pg_sys::Oid>()?;
    crate::access::require_holder(client, holder, what);
    Ok(value.unwrap_or(false))
}

fn first_bool(rows: SpiTupleTable<'_>) -> pgrx::spi::SpiResult<bool> {
    crate::plans::first_value::<bool>(rows).map(|v| v.unwrap_or(false))
}

const NAME_OWNER_NOW: [pgrx::pg_sys::PgOid; 3] = [types::TEXT, types::TEXT, types::TIMESTAMPTZ];
const NAME_OWNER_NOW_TTL: [pgrx::pg_sys::PgOid; 4] =
    [types::TEXT, types::TEXT, types::TIMESTAMPTZ, types::INTERVAL];
const NAME_OWNER_NOW_TTL_ROLE: [pgrx::pg_sys::PgOid; 5] =
    [types::TEXT, types::TEXT, types::TIMESTAMPTZ, types::INTERVAL, types::OID];
