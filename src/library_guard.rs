//! Sessions still running an older library may not write.
//!
//! PostgreSQL finds a loaded library by its path, so a backend that loaded
//! pg_distlock before a package upgrade keeps running the old code after
//! `ALTER EXTENSION pg_distlock UPDATE`, against the new schema, with the old
//! semantics (seen overwriting a held semaphore's limit). Every table of
//! pg_distlock has a statement trigger that calls `library_guard` with the
//! version the installed SQL belongs to (each release's update script
//! recreates the triggers with its own version). A backend whose library is
//! another version is refused with 55000 before the statement writes
//! anything; reads are not guarded. A library older than 0.4.0 has no
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
    let installed = trigger.extra_args()?;
    if installed.first().map(String::as_str) != Some(LIBRARY_VERSION) {
        let installed = installed.first().cloned().unwrap_or_default();
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
