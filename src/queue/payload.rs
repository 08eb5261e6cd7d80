//! Job payloads passed through as PostgreSQL's own jsonb datums.
//!
//! pgrx's `JsonB` goes through serde_json's f64 numbers, which rounds
//! 12345678901234567890123 and cannot hold 1e400 at all (one such job
//! made every consume fail). A payload is only stored and handed back, so
//! it is never parsed: the datum is copied as it is.

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::nullable::Nullable;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};

/// A type for jsonb (or jsonb[]) datums passed through as they are,
/// detoasted and copied into the memory context they were read in.
macro_rules! raw_datum {
    ($(#[$doc:meta])* $name:ident, $oid:ident, $sql:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy)]
        pub struct $name(pg_sys::Datum);

        impl FromDatum for $name {
            unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<Self> {
                if is_null {
                    return None;
                }
                // A copy in the current memory context: the value may live in a
                // tuple or a toast slice that SPI frees before the function returns.
                let copy = unsafe { pg_sys::pg_detoast_datum_copy(datum.cast_mut_ptr()) };
                Some($name(pg_sys::Datum::from(copy)))
            }
        }

        impl IntoDatum for $name {
            fn into_datum(self) -> Option<pg_sys::Datum> {
                Some(self.0)
            }

            fn type_oid() -> pg_sys::Oid {
                pg_sys::$oid
            }
        }

        unsafe impl<'fcx> ArgAbi<'fcx> for $name {
            unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
                let index = arg.index();
                unsafe { arg.unbox_arg_using_from_datum() }.unwrap_or_else(|| panic!("argument {index} must not be null"))
            }

            unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
                unsafe { arg.unbox_arg_using_from_datum() }.into()
            }
        }

        unsafe impl BoxRet for $name {
            unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
                unsafe { fcinfo.return_raw_datum(self.0) }
            }
        }

        unsafe impl SqlTranslatable for $name {
            const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!($name);
            const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
            const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal($sql));
            const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Ok(ReturnsRef::One(SqlMappingRef::literal($sql)));
        }
    };
}

raw_datum!(
    /// A job's payload: a detoasted jsonb value.
    Payload, JSONBOID, "jsonb"
);

raw_datum!(
    /// Many jobs' payloads: a detoasted jsonb[] value, which may hold NULLs.
    Payloads, JSONBARRAYOID, "jsonb[]"
);

impl Payloads {
    /// Whether any element is NULL.
    pub fn contains_nulls(&self) -> bool {
        unsafe { pg_sys::array_contains_nulls(self.0.cast_mut_ptr()) }
    }
}
