//! Sessions still running an older library may not write.
//!
//! PostgreSQL finds a loaded library by its path, so a backend that loaded
//! pg_distlock before a package upgrade keeps running the old code after
//! `ALTER EXTENSION pg_distlock UPDATE`, against the new schema, with the old
//! semantics (seen overwriting a held semaphore's limit). Every table of
//! pg_distlock has a statement trigger that calls `library_guard` with the
//! version the installed SQL belongs to (each release's update script
//! recreates the triggers with its own version). A backend whose library is
//! older is refused with 55000 before the statement writes anything; reads
//! are not guarded. A newer library passes: between installing a release
//! and `ALTER EXTENSION UPDATE` it serves the older SQL on purpose (see
//! src/version.rs). A library older than 0.4.0 has no
//! `library_guard` at all: PostgreSQL refuses its writes with 42883 (`could
//! not find function "library_guard_wrapper"`), which docs/upgrading.md
//! explains.

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::errors::raise_with_hint;
use crate::version::LIBRARY_VERSION;

#[pg_trigger]
fn library_guard<'a>(
    trigger: &'a PgTrigger<'a>,
) -> Result<Option<PgHeapTuple<'a, AllocatedByPostgres>>, pgrx::PgTriggerError> {
    let installed = trigger.extra_args()?.into_iter().next().unwrap_or_default();
    if older(LIBRARY_VERSION, &installed) {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "this session runs pg_distlock's library {LIBRARY_VERSION}, but this database's pg_distlock is {installed}"
            ),
            "The session loaded its library before the extension was updated, and may not write with the old \
             code. Reconnect (with pg_distlock in shared_preload_libraries: restart the server).",
        );
    }
    Ok(None)
}

/// Whether version `library` comes before version `installed` (numeric
/// parts compared in order); a version that is not all numbers is older
/// than any other but itself, so that a malformed argument refuses.
fn older(library: &str, installed: &str) -> bool {
    let parts = |v: &str| v.split('.').map(|p| p.parse::<u64>()).collect::<Result<Vec<_>, _>>();
    match (parts(library), parts(installed)) {
        (Ok(library), Ok(installed)) => library < installed,
        _ => library != installed,
    }
}

#[cfg(any(test, feature = "pg_test"))]
#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn library_guard_orders_versions_by_their_numbers() {
        assert!(super::older("0.4.0", "0.5.0"));
        assert!(super::older("0.9.0", "0.10.0"));
        assert!(!super::older("0.4.0", "0.4.0"));
        assert!(!super::older("0.5.0", "0.4.0"));
        assert!(super::older("0.4.0", "x"));
    }
}
