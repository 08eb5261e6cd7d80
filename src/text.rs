//! Names in the database's own encoding, and the one rule every name obeys.
//!
//! pgrx's `&str` and `String` require UTF-8 and panic (XX000) on a
//! non-ASCII character in a LATIN1 or EUC database. A name is only compared,
//! hashed and stored, so it is kept as the bytes PostgreSQL gave: hashing
//! them matches `distlock.lock_id(text)` (md5 of the same bytes) in any
//! encoding, and they go back to SQL unchanged.

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::nullable::Nullable;
use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::pgrx_sql_entity_graph::metadata::{
    ArgumentError, ReturnsError, ReturnsRef, SqlMappingRef, SqlTranslatable, TypeOrigin,
};
use pgrx::PgSqlErrorCode;

use crate::errors::{raise, required};

/// Longest name, key, owner or worker id, in bytes of the database encoding:
/// two of them still fit one btree entry (at most 2704 bytes).
pub const MAX_NAME_BYTES: usize = 1000;

/// A text value as the database encodes it.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct Text(Vec<u8>);

impl Text {
    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Empty or only ASCII whitespace (the characters `btrim(s, E' \t\n\r\f\v')`
    /// removes), the same test in every encoding.
    pub fn is_blank(&self) -> bool {
        self.0.iter().all(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c))
    }

    /// The value for a message: as it is in a UTF-8 database; elsewhere
    /// non-ASCII bytes as `\xNN`, since a message is not converted from
    /// Rust's UTF-8 to the server encoding.
    pub fn shown(&self) -> String {
        if is_utf8_database() {
            if let Ok(text) = std::str::from_utf8(&self.0) {
                return text.to_string();
            }
        }
        self.0
            .iter()
            .map(|&b| if b.is_ascii() { (b as char).to_string() } else { format!("\\x{b:02x}") })
            .collect()
    }
}

impl From<&str> for Text {
    fn from(value: &str) -> Self {
        Text(value.as_bytes().to_vec())
    }
}

/// Bytes already in the database encoding (as a `Text` gave them).
impl From<&[u8]> for Text {
    fn from(value: &[u8]) -> Self {
        Text(value.to_vec())
    }
}

impl PartialEq<&str> for Text {
    fn eq(&self, other: &&str) -> bool {
        self.0 == other.as_bytes()
    }
}

/// Shown as [`Text::shown`].
impl std::fmt::Display for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.shown())
    }
}

impl std::fmt::Debug for Text {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.shown())
    }
}

fn is_utf8_database() -> bool {
    unsafe { pg_sys::GetDatabaseEncoding() == pg_sys::pg_enc::PG_UTF8 as i32 }
}

/// SQL_ASCII stores whatever bytes clients send (most often UTF-8) and
/// checks none: what goes back to a UTF-8 client must be checked here.
pub fn is_sql_ascii_database() -> bool {
    unsafe { pg_sys::GetDatabaseEncoding() == pg_sys::pg_enc::PG_SQL_ASCII as i32 }
}

/// A name argument: not NULL (22004), not blank and at most
/// [`MAX_NAME_BYTES`] (22023), checked before anything is written.
pub fn name(value: Option<Text>, argument: &str) -> Text {
    let text = required(value, argument);
    checked_name(text, argument)
}

/// [`name`] for a value that is already known not to be NULL.
pub fn checked_name(text: Text, argument: &str) -> Text {
    if text.is_blank() {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{argument} must not be blank, got \"{}\"", text.shown()),
        );
    }
    if text.0.len() > MAX_NAME_BYTES {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{argument} must be at most {MAX_NAME_BYTES} bytes, got {} bytes", text.0.len()),
        );
    }
    text
}

impl FromDatum for Text {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<Self> {
        if is_null {
            return None;
        }
        unsafe {
            let unpacked = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
            let len = pgrx::varlena::varsize_any_exhdr(unpacked);
            let data = pgrx::varlena::vardata_any(unpacked) as *const u8;
            let bytes = std::slice::from_raw_parts(data, len).to_vec();
            if unpacked as *mut pg_sys::varlena != datum.cast_mut_ptr::<pg_sys::varlena>() {
                pg_sys::pfree(unpacked.cast());
            }
            Some(Text(bytes))
        }
    }
}

impl IntoDatum for Text {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        (&self).into_datum()
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::TEXTOID
    }
}

impl IntoDatum for &Text {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        let text = unsafe { pg_sys::cstring_to_text_with_len(self.0.as_ptr().cast(), self.0.len() as i32) };
        Some(pg_sys::Datum::from(text))
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::TEXTOID
    }
}

/// A NULL where the signature takes no NULL is 22004, not a panic.
///
/// # Safety
/// As `Arg::unbox_arg_using_from_datum`.
unsafe fn unbox_not_null<'fcx, T: FromDatum + 'fcx>(arg: Arg<'_, 'fcx>) -> T {
    let index = arg.index();
    unsafe { arg.unbox_arg_using_from_datum() }.unwrap_or_else(|| {
        raise(PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED, format!("argument {index} must not be NULL"))
    })
}

unsafe impl<'fcx> ArgAbi<'fcx> for Text {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        unsafe { unbox_not_null(arg) }
    }

    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        unsafe { arg.unbox_arg_using_from_datum() }.into()
    }
}

unsafe impl BoxRet for Text {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        match self.into_datum() {
            Some(datum) => unsafe { fcinfo.return_raw_datum(datum) },
            None => fcinfo.return_null(),
        }
    }
}

unsafe impl SqlTranslatable for Text {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(Text);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("TEXT"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Ok(ReturnsRef::One(SqlMappingRef::literal("TEXT")));
}

/// A `text[]` argument, its elements kept as [`Text`] (pgrx's arrays need
/// UTF-8 strings). A multi-dimensional array is read flat.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TextArray(pub Vec<Option<Text>>);

impl FromDatum for TextArray {
    unsafe fn from_polymorphic_datum(datum: pg_sys::Datum, is_null: bool, _: pg_sys::Oid) -> Option<Self> {
        if is_null {
            return None;
        }
        unsafe {
            let array = pg_sys::pg_detoast_datum(datum.cast_mut_ptr()) as *mut pg_sys::ArrayType;
            let mut elements: *mut pg_sys::Datum = std::ptr::null_mut();
            let mut nulls: *mut bool = std::ptr::null_mut();
            let mut count: std::ffi::c_int = 0;
            pg_sys::deconstruct_array(
                array,
                pg_sys::TEXTOID,
                -1,
                false,
                pg_sys::TYPALIGN_INT as std::ffi::c_char,
                &mut elements,
                &mut nulls,
                &mut count,
            );
            let values = (0..count.max(0) as usize)
                .map(|i| Text::from_polymorphic_datum(*elements.add(i), *nulls.add(i), pg_sys::TEXTOID))
                .collect();
            Some(TextArray(values))
        }
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for TextArray {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        unsafe { unbox_not_null(arg) }
    }

    unsafe fn unbox_nullable_arg(arg: Arg<'_, 'fcx>) -> Nullable<Self> {
        unsafe { arg.unbox_arg_using_from_datum() }.into()
    }
}

unsafe impl SqlTranslatable for TextArray {
    const TYPE_IDENT: &'static str = pgrx::pgrx_resolved_type!(TextArray);
    const TYPE_ORIGIN: TypeOrigin = TypeOrigin::External;
    const ARGUMENT_SQL: Result<SqlMappingRef, ArgumentError> = Ok(SqlMappingRef::literal("TEXT[]"));
    const RETURN_SQL: Result<ReturnsRef, ReturnsError> = Ok(ReturnsRef::One(SqlMappingRef::literal("TEXT[]")));
}
