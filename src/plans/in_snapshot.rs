//! A statement run in a snapshot taken earlier, for a read that must see
//! what an earlier statement saw (other transactions' work as of its start,
//! this transaction's own work until now).
//!
//! pgrx 0.18 keeps a prepared statement's plan private and runs every
//! statement in a snapshot of its own, so these plans are prepared and run
//! with SPI's own calls: SPI_prepare and SPI_keepplan (kept for the life of
//! the backend, as plans.rs keeps pgrx's), SPI_execute_snapshot.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;

use pgrx::datum::{DatumWithOid, FromDatum};
use pgrx::pg_sys::{self, PgOid};
use pgrx::spi::SpiClient;
use pgrx::PgSqlErrorCode;

use crate::errors::raise;

thread_local! {
    static KEPT: RefCell<HashMap<usize, KeptPlan>> = RefCell::new(HashMap::new());
}

/// A plan SPI_keepplan moved out of SPI's memory: it lives as long as the
/// backend, and PostgreSQL's plan cache re-plans it when its tables change.
#[derive(Clone, Copy)]
struct KeptPlan(pg_sys::SPIPlanPtr);

/// A snapshot held from when it was taken until dropped.
pub(crate) struct HeldSnapshot(pg_sys::Snapshot);

impl HeldSnapshot {
    /// The snapshot a statement starting now would take: a new one in READ
    /// COMMITTED, the transaction's own in REPEATABLE READ and SERIALIZABLE.
    pub(crate) fn now() -> Self {
        // RegisterSnapshot copies the static snapshot GetTransactionSnapshot
        // returns (the next statement overwrites it) and keeps the copy
        // until it is unregistered, or until the resource owner ends.
        HeldSnapshot(unsafe { pg_sys::RegisterSnapshot(pg_sys::GetTransactionSnapshot()) })
    }
}

impl Drop for HeldSnapshot {
    fn drop(&mut self) {
        // While an ERROR unwinds, the transaction's (or subtransaction's)
        // abort releases it with its resource owner.
        if !std::thread::panicking() {
            unsafe { pg_sys::UnregisterSnapshot(self.0) };
        }
    }
}

/// Runs the kept plan of `sql` (a `'static` text: its address is the key;
/// a statement returning one bigint) with `arguments` in `snapshot`, its
/// command id advanced so that it sees this transaction's work until now;
/// the first column of its first row (None when it returns no row or NULL).
pub(crate) fn first_int8_in(
    client: &SpiClient<'_>,
    sql: &'static str,
    arg_types: &[PgOid],
    arguments: &[DatumWithOid<'_>],
    snapshot: &HeldSnapshot,
) -> Option<i64> {
    let plan = kept_plan(client, sql, arg_types);
    let mut values: Vec<pg_sys::Datum> =
        arguments.iter().map(|a| a.datum().map_or(pg_sys::Datum::from(0), |d| d.sans_lifetime())).collect();
    let nulls: Vec<std::ffi::c_char> =
        arguments.iter().map(|a| if a.datum().is_some() { b' ' as _ } else { b'n' as _ }).collect();
    unsafe {
        // Not read-only: SPI then runs it in a copy of the snapshot whose
        // command id it advances past this transaction's last command.
        let status = pg_sys::SPI_execute_snapshot(
            plan.0,
            values.as_mut_ptr(),
            nulls.as_ptr(),
            snapshot.0,
            std::ptr::null_mut(),
            false,
            true,
            1,
        );
        if status != pg_sys::SPI_OK_SELECT as i32 {
            raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("a statement in a held snapshot ended with SPI status {status}"));
        }
        let table = pg_sys::SPI_tuptable;
        if table.is_null() || pg_sys::SPI_processed == 0 {
            return None;
        }
        let mut is_null = false;
        let datum = pg_sys::SPI_getbinval(*(*table).vals, (*table).tupdesc, 1, &mut is_null);
        let value = i64::from_datum(datum, is_null);
        pg_sys::SPI_freetuptable(table);
        value
    }
}

fn kept_plan(client: &SpiClient<'_>, sql: &'static str, arg_types: &[PgOid]) -> KeptPlan {
    let key = sql.as_ptr() as usize;
    if let Some(plan) = KEPT.with(|kept| kept.borrow().get(&key).copied()) {
        return plan;
    }
    super::check_declared_parameters(sql, arg_types);
    let text = CString::new(sql).unwrap_or_else(|_| {
        raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "a statement's text holds a NUL byte".to_string())
    });
    let mut oids: Vec<pg_sys::Oid> = arg_types.iter().map(|t| t.value()).collect();
    let plan = crate::version::prepare_checked(client, || unsafe {
        // SPI_prepare raises what is wrong with the statement; NULL means
        // SPI's own misuse.
        let plan = pg_sys::SPI_prepare(text.as_ptr(), oids.len() as i32, oids.as_mut_ptr());
        if plan.is_null() {
            let status = std::ptr::addr_of!(pg_sys::SPI_result).read();
            raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, format!("could not prepare a statement (SPI status {status})"));
        }
        pg_sys::SPI_keepplan(plan);
        plan
    });
    let plan = KeptPlan(plan);
    KEPT.with(|kept| kept.borrow_mut().insert(key, plan));
    plan
}
