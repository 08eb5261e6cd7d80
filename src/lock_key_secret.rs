//! The keyed hash that places pg_distlock's own locks on names (lease and
//! election grants, queue claim turns): SipHash-1-3 keyed with this
//! database's secret (`distlock.lock_key_secret`, drawn at install), so no
//! tenant can pick a name whose lock collides with another's on purpose.
//! 0.3.0 took the bits of md5(name), which anyone could match offline and
//! so stall another tenant's grants.
//!
//! Each backend reads the secret once; it is read again when the table is
//! another one (the extension was dropped and created again). The secret
//! itself never changes (a trigger refuses it), or backends that read the
//! old one would take other locks than those reading the new one.

use std::cell::Cell;
use std::hash::Hasher;

use pgrx::pg_sys;
use pgrx::PgSqlErrorCode;
use siphasher::sip::SipHasher13;

use crate::errors::{raise_with_hint, OrRaise};

thread_local! {
    /// The secret and the OID of the table it was read from.
    static SECRET: Cell<Option<(pg_sys::Oid, [u64; 2])>> = const { Cell::new(None) };
}

fn read(table: pg_sys::Oid) -> [u64; 2] {
    let bytes: Option<Vec<u8>> = crate::access::connect(|client| {
        client
            .select(include_str!("../sql/queries/lock_key_secret.sql"), Some(1), &[])
            .and_then(crate::plans::first_value::<Vec<u8>>)
            .or_raise()
    });
    let Some(bytes) = bytes.filter(|b| b.len() >= 16) else {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            "distlock.lock_key_secret holds no secret",
            "Drop and create the extension to draw one.",
        )
    };
    let half = |at: usize| u64::from_le_bytes(std::array::from_fn(|i| bytes[at + i]));
    let secret = [half(0), half(8)];
    SECRET.set(Some((table, secret)));
    secret
}

fn secret(table: pg_sys::Oid) -> [u64; 2] {
    match SECRET.get() {
        Some((read_from, secret)) if read_from == table => secret,
        _ => read(table),
    }
}

/// The 32-bit key of `name`'s lock in `class`. While the installed SQL is
/// older than 0.4.0 (this library serves it until `ALTER EXTENSION pg_distlock
/// UPDATE`), there is no secret yet, and the key is 0.3.0's, so that this
/// backend and one still running the old library exclude each other.
pub fn name_key(class: i32, name: &[u8]) -> u32 {
    let table = crate::version::table_oid(c"lock_key_secret");
    if table == pg_sys::InvalidOid {
        return crate::hashing::key_for_name(name) as u32;
    }
    let [k0, k1] = secret(table);
    let mut hasher = SipHasher13::new_with_keys(k0, k1);
    hasher.write_i32(class);
    hasher.write(name);
    hasher.finish() as u32
}
