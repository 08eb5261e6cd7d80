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

/// A detoasted jsonb value, allocated in the memory context it was read in.
#[derive(Debug, Clone, Copy)]
pub struct Payload(pg_sys::Datum);

impl FromDatum for Payload {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<Self> {
        if is_null {
            return None;
        }
        // A copy in the current memory context: the value may live in a
        // tuple or a toast slice that SPI frees before the function returns.
        let copy = unsafe { pg_sys::pg_detoast_datum_copy(datum.cast_mut_ptr()) };
        Some(Payload(pg_sys::Datum::from(copy)))
    }
}

impl IntoDatum for Payload {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(self.0)
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for Payload {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        unsafe { arg.unbox_arg_using_from_datum() }.unwrap_or_else(|| panic!("argument {index} must not be null"))
    }

    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        unsafe { arg.unbox_arg_using_from_datum() }.into()
    }
}

unsafe impl BoxRet for Payload {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        unsafe { fcinfo.return_raw_datum(self.0) }
    }
}

unsafe impl SqlTranslatable for Payload {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(Payload);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("jsonb"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Ok(ReturnsRef::One(SqlMappingRef::literal("jsonb")));
}
