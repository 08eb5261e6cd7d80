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
//! not find function "distlock_library_guard"`), which docs/upgrading.md
//! explains.

use std::ffi::CStr;

use pgrx::pg_sys;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise, raise_with_hint};
use crate::version::LIBRARY_VERSION;

// A plain version-1 C function rather than a #[pg_trigger]: it runs before
// every statement that writes a pg_distlock table (four times per job on the
// queue's path), and pgrx's trigger wrapper (a PgTrigger, its arguments
// copied into Strings) cost the consume + complete cycle about 12 % in
// benches/guard.sh. This reads the trigger's argument in place.
static V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };

#[no_mangle]
pub extern "C" fn pg_finfo_distlock_library_guard() -> &'static pg_sys::Pg_finfo_record {
    &V1
}

/// `distlock.library_guard()`, a BEFORE ... FOR EACH STATEMENT trigger whose
/// one argument is the version of the installed SQL.
#[no_mangle]
#[pg_guard]
pub unsafe extern "C-unwind" fn distlock_library_guard(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::Datum {
    let context = unsafe { (*fcinfo).context };
    if context.is_null() || unsafe { (*context).type_ } != pg_sys::NodeTag::T_TriggerData {
        raise(
            PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
            "distlock.library_guard() may only be called as a trigger",
        );
    }
    let data = context.cast::<pg_sys::TriggerData>();
    if unsafe { (*data).tg_event } & pg_sys::TRIGGER_EVENT_ROW != 0 {
        // Returning NULL from a row trigger would drop the row silently.
        raise(
            PgSqlErrorCode::ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED,
            "distlock.library_guard() must be fired FOR EACH STATEMENT",
        );
    }
    let trigger = unsafe { (*data).tg_trigger };
    let installed = unsafe {
        if (*trigger).tgnargs < 1 {
            c""
        } else {
            CStr::from_ptr(*(*trigger).tgargs)
        }
    };
    let installed = installed.to_str().unwrap_or("");
    if installed != LIBRARY_VERSION && older(LIBRARY_VERSION, installed) {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!(
                "this session runs pg_distlock's library {LIBRARY_VERSION}, but this database's pg_distlock is {installed}"
            ),
            "The session loaded its library before the extension was updated, and may not write with the old \
             code. Reconnect (with pg_distlock in shared_preload_libraries: restart the server).",
        );
    }
    // A statement-level trigger returns NULL.
    pg_sys::Datum::from(0usize)
}

pgrx::extension_sql!(
    r#"
CREATE FUNCTION distlock.library_guard() RETURNS trigger
    AS 'MODULE_PATHNAME', 'distlock_library_guard'
    LANGUAGE c;
"#,
    name = "library_guard",
    requires = ["schema"]
);

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
