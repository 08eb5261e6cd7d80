//! Prepared statements kept for the life of the backend.
//!
//! Parsing and planning a statement costs more than running these small
//! ones, so each SQL text is prepared once per backend (like PL/pgSQL does)
//! and its saved plan reused; PostgreSQL's plan cache re-plans it when the
//! tables change. Every statement runs with a fresh snapshot (non-read-only
//! SPI), so claims see the latest committed state after taking a lock.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use pgrx::pg_sys::{self, PgOid};
use pgrx::datum::{FromDatum, IntoDatum};
use crate::errors::OrRaise;
use pgrx::spi::{OwnedPreparedStatement, SpiClient, SpiResult, SpiTupleTable};

pub(crate) mod in_snapshot;

thread_local! {
    static PLANS: RefCell<HashMap<usize, Rc<OwnedPreparedStatement>>> = RefCell::new(HashMap::new());
}

/// While alive, kept plans run as generic plans; dropping it (also when an
/// ERROR unwinds) restores the caller's plan_cache_mode.
///
/// With parameters, PostgreSQL's plan cache plans each execution anew (a
/// custom plan) until the generic plan looks no costlier, and for some
/// statements (a claim with LIMIT $1) it never does: re-planning then costs
/// more than running the statement. Every pg_distlock statement finds its
/// rows by a key or an index condition whatever the values, so the generic
/// plan is the one to run. pgrx does not expose SPI_prepare_cursor's
/// CURSOR_OPT_GENERIC_PLAN, so the setting is held while pg_distlock's own
/// statements run, as SET LOCAL would, without the GUC machinery's cost.
pub struct GenericPlans {
    saved: i32,
}

pub fn generic_plans() -> GenericPlans {
    unsafe {
        let saved = pg_sys::plan_cache_mode;
        pg_sys::plan_cache_mode = pg_sys::PlanCacheMode::PLAN_CACHE_MODE_FORCE_GENERIC_PLAN as i32;
        GenericPlans { saved }
    }
}

impl Drop for GenericPlans {
    fn drop(&mut self) {
        unsafe { pg_sys::plan_cache_mode = self.saved };
    }
}

/// While alive, statements planned read their rows along an index in the
/// order they want them rather than collect and sort them: bitmap scans and
/// sorts are priced out, as `SET LOCAL enable_bitmapscan = off, enable_sort
/// = off` would; dropping it (also when an ERROR unwinds) restores the
/// caller's settings.
///
/// A claim wants the first few runnable jobs in the claim index's order.
/// Which plan reads them that way depends on estimates, and while a
/// snapshot is held they drift: with autovacuum's ANALYZE counting the dead
/// rows the hold leaves, the claim's generic plan switched to a bitmap scan
/// of every runnable job's index entry, each claimed job's dead one
/// included, and a sort, and the claim of 64 jobs went from 3 ms to 43 ms
/// after a minute's hold at 13,000 jobs/s (issue 46). Only the planning
/// reads these settings, and kept plans are planned again only when their
/// tables change. The guard lasts through the statement's execution (its
/// plan is made there), so a trigger someone added to the queue's table
/// would plan its own statements under it too, and a SET it made to these
/// two settings would be undone; only the extension's owner can add one.
pub struct OrderedScans {
    saved: (bool, bool),
}

pub fn ordered_scans() -> OrderedScans {
    unsafe {
        let saved = (pg_sys::enable_bitmapscan, pg_sys::enable_sort);
        pg_sys::enable_bitmapscan = false;
        pg_sys::enable_sort = false;
        OrderedScans { saved }
    }
}

impl Drop for OrderedScans {
    fn drop(&mut self) {
        unsafe { (pg_sys::enable_bitmapscan, pg_sys::enable_sort) = self.saved };
    }
}

/// The kept plan for `sql` (a `'static` text: its address is the cache key).
pub fn plan(client: &SpiClient<'_>, sql: &'static str, arg_types: &[PgOid]) -> Rc<OwnedPreparedStatement> {
    let key = sql.as_ptr() as usize;
    if let Some(plan) = PLANS.with(|plans| plans.borrow().get(&key).cloned()) {
        return plan;
    }
    check_declared_parameters(sql, arg_types);
    let prepared = crate::version::prepare_checked(client, || {
        client
            .prepare_mut(sql, arg_types)
            .or_raise()
            .keep()
    });
    let plan = Rc::new(prepared);
    PLANS.with(|plans| plans.borrow_mut().insert(key, plan.clone()));
    plan
}

/// Every statement file starts with `-- params: <types>` (or `none`), the
/// types the library prepares it with; the search_path test compiles each
/// statement with those types to learn what it uses. Checked once per
/// backend and statement, when it is first prepared, so the line cannot
/// drift from the code.
fn check_declared_parameters(sql: &str, arg_types: &[PgOid]) {
    let declared: Vec<&str> = sql
        .lines()
        .find_map(|line| line.strip_prefix("-- params:"))
        .map(|list| list.split(',').map(str::trim).filter(|t| *t != "none").collect())
        .unwrap_or_else(|| {
            crate::errors::raise(
                pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
                format!("statement has no \"-- params:\" line: {}", sql.lines().next().unwrap_or_default()),
            )
        });
    let given: Vec<&str> = arg_types.iter().map(|oid| types::name(*oid)).collect();
    if declared != given {
        crate::errors::raise(
            pgrx::PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
            format!("statement declares parameters {declared:?} but is prepared with {given:?}"),
        );
    }
}

/// Runs the kept retention DELETE `sql`, whose one argument is the age
/// (an interval) beyond which rows go; returns how many it deleted.
pub fn delete_older_than(client: &mut pgrx::spi::SpiClient<'_>, sql: &'static str, older_than: pgrx::datum::Interval) -> i64 {
    let stmt = plan(client, sql, &[types::INTERVAL]);
    client.update(&*stmt, None, &[older_than.into()]).map(|deleted| deleted.len() as i64).or_raise()
}

/// The first column of the first row, or None when there is no row.
pub fn first_value<T: FromDatum + IntoDatum>(rows: SpiTupleTable<'_>) -> SpiResult<Option<T>> {
    if rows.is_empty() {
        Ok(None)
    } else {
        rows.first().get_one::<T>()
    }
}

/// `read` of the first row, or None when there is no row.
pub fn first_row<'a, T>(
    rows: SpiTupleTable<'a>,
    read: impl FnOnce(&SpiTupleTable<'a>) -> SpiResult<T>,
) -> SpiResult<Option<T>> {
    if rows.is_empty() {
        Ok(None)
    } else {
        read(&rows.first()).map(Some)
    }
}

/// The first two columns of the first row, or None when there is no row.
pub fn first_two<A: FromDatum + IntoDatum, B: FromDatum + IntoDatum>(
    rows: SpiTupleTable<'_>,
) -> SpiResult<Option<(Option<A>, Option<B>)>> {
    if rows.is_empty() {
        Ok(None)
    } else {
        rows.first().get_two::<A, B>().map(Some)
    }
}

/// Shorthands for argument types.
pub mod types {
    use pgrx::pg_sys::{BuiltinOid, PgOid};
    pub const INT4: PgOid = PgOid::BuiltIn(BuiltinOid::INT4OID);
    pub const INT8: PgOid = PgOid::BuiltIn(BuiltinOid::INT8OID);
    pub const TEXT: PgOid = PgOid::BuiltIn(BuiltinOid::TEXTOID);
    pub const BOOL: PgOid = PgOid::BuiltIn(BuiltinOid::BOOLOID);
    pub const OID: PgOid = PgOid::BuiltIn(BuiltinOid::OIDOID);
    pub const TIMESTAMPTZ: PgOid = PgOid::BuiltIn(BuiltinOid::TIMESTAMPTZOID);
    pub const JSONB: PgOid = PgOid::BuiltIn(BuiltinOid::JSONBOID);
    pub const INTERVAL: PgOid = PgOid::BuiltIn(BuiltinOid::INTERVALOID);
    pub const INT8_ARRAY: PgOid = PgOid::BuiltIn(BuiltinOid::INT8ARRAYOID);
    pub const INT4_ARRAY: PgOid = PgOid::BuiltIn(BuiltinOid::INT4ARRAYOID);
    pub const TEXT_ARRAY: PgOid = PgOid::BuiltIn(BuiltinOid::TEXTARRAYOID);
    pub const JSONB_ARRAY: PgOid = PgOid::BuiltIn(BuiltinOid::JSONBARRAYOID);
    pub const TIMESTAMPTZ_ARRAY: PgOid = PgOid::BuiltIn(BuiltinOid::TIMESTAMPTZARRAYOID);

    /// The name a statement's `-- params:` line gives the type.
    pub fn name(oid: PgOid) -> &'static str {
        match oid {
            INT4 => "integer",
            INT8 => "bigint",
            TEXT => "text",
            BOOL => "boolean",
            OID => "oid",
            TIMESTAMPTZ => "timestamptz",
            JSONB => "jsonb",
            INTERVAL => "interval",
            INT8_ARRAY => "bigint[]",
            INT4_ARRAY => "integer[]",
            TEXT_ARRAY => "text[]",
            JSONB_ARRAY => "jsonb[]",
            TIMESTAMPTZ_ARRAY => "timestamptz[]",
            _ => "unknown",
        }
    }
}
