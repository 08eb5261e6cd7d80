//! The frozen text-to-key hash: the first 8 bytes of md5(name), big-endian.
//!
//! `distlock.lock_id(name)` equals `('x' || substr(md5(name), 1, 16))::bit(64)::bigint`
//! for every text. Keys derived from it are stored by users and other
//! sessions, so this function must never change.

use md5::{Digest, Md5};
use pgrx::pg_sys;
use pgrx::prelude::*;

pub fn key_for_name(name: &[u8]) -> i64 {
    let digest = Md5::digest(name);
    let mut first_eight = [0u8; 8];
    first_eight.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first_eight)
}

// lock_id and get_task_lock_id are plain version-1 C functions rather than
// #[pg_extern]s: pgrx's &str argument requires UTF-8, while md5() (and so
// the frozen definition) hashes the text's bytes in any database encoding.

static V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

#[no_mangle]
pub extern "C" fn pg_finfo_distlock_lock_id() -> &'static pg_sys::Pg_finfo_record {
    &V1
}

/// `distlock.lock_id(name text) → bigint` (also `get_task_lock_id`); STRICT,
/// so the argument is never NULL.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn distlock_lock_id(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    unsafe {
        let datum = pgrx::fcinfo::pg_getarg_datum_raw(fcinfo, 0);
        let text = pg_sys::pg_detoast_datum_packed(datum.cast_mut_ptr());
        pg_sys::Datum::from(key_for_name(pgrx::varlena::varlena_to_byte_slice(text)))
    }
}

pgrx::extension_sql!(
    r#"
-- The advisory-lock key of a name: the first 8 bytes of md5(name), big-endian.
-- Frozen: equal to ('x' || substr(md5(name), 1, 16))::bit(64)::bigint.
CREATE FUNCTION distlock.lock_id(name text) RETURNS bigint
    AS 'MODULE_PATHNAME', 'distlock_lock_id'
    LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;

-- The PL/pgSQL recipe's name for lock_id.
CREATE FUNCTION distlock.get_task_lock_id(p_task_name text) RETURNS bigint
    AS 'MODULE_PATHNAME', 'distlock_lock_id'
    LANGUAGE c IMMUTABLE STRICT PARALLEL SAFE;
"#,
    name = "lock_id",
    requires = ["schema"]
);

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn sql_md5_key(name: &str) -> i64 {
        Spi::get_one_with_args::<i64>(
            "SELECT ('x' || substr(md5($1), 1, 16))::bit(64)::bigint",
            &[name.into()],
        )
        .expect("query runs")
        .expect("md5 of a text is never NULL")
    }

    #[pg_test]
    fn hashing_matches_the_sql_md5_expression() {
        for name in ["", "a", "task-1", "über", "日本語のタスク", "🔒 lock", &"x".repeat(1000)] {
            assert_eq!(super::key_for_name(name.as_bytes()), sql_md5_key(name), "name {name:?}");
        }
    }

    #[pg_test]
    fn hashing_matches_sql_for_many_names() {
        let mismatches = Spi::get_one::<i64>(
            "SELECT count(*) FROM generate_series(1, 5000) AS g(i), \
             LATERAL (SELECT 'k' || g.i || repeat('é', g.i % 7) AS name) n \
             WHERE distlock.lock_id(n.name) <> ('x' || substr(md5(n.name), 1, 16))::bit(64)::bigint",
        )
        .expect("query runs");
        assert_eq!(mismatches, Some(0));
    }

    #[pg_test]
    fn hashing_known_values_are_frozen() {
        // md5('') = d41d8cd98f00b204e9800998ecf8427e
        assert_eq!(super::key_for_name(b""), 0xd41d8cd98f00b204_u64 as i64);
        assert_eq!(
            Spi::get_one::<i64>("SELECT distlock.get_task_lock_id('')").expect("query runs"),
            Some(0xd41d8cd98f00b204_u64 as i64)
        );
        assert_eq!(
            Spi::get_one::<bool>("SELECT distlock.lock_id(NULL) IS NULL").expect("query runs"),
            Some(true)
        );
    }
}
