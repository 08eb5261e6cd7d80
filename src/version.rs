//! Which version of pg_distlock's SQL objects this database has.
//!
//! A new shared library can meet a database whose SQL objects are still
//! those of an older release, until ALTER EXTENSION pg_distlock UPDATE runs.
//! Every C symbol an older release's script names stays exported, and a
//! function whose signature changed keeps its old entry point; so the old
//! SQL keeps working wherever the old tables suffice. Where a statement
//! needs a newer table or column, preparing it fails, and that failure is
//! turned into one clear error telling the user to update.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;
use pgrx::PgSqlErrorCode;

/// The version this library was built as.
pub const LIBRARY_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version recorded for pg_distlock in this database's pg_extension.
pub fn installed_version(client: &SpiClient<'_>) -> Option<String> {
    client
        .select(include_str!("../sql/queries/installed_version.sql"), None, &[])
        // No row (not installed) is an error here, and None like any other.
        .and_then(|rows| rows.first().get_one::<String>())
        .ok()
        .flatten()
}

/// Prepares with `prepare`. In a database whose SQL objects are older than
/// the library, a statement that names a missing table, column or function
/// fails with 55000 and a hint to update, instead of the bare 42703 or 42P01.
pub fn prepare_checked<R>(client: &SpiClient<'_>, prepare: impl FnOnce() -> R) -> R {
    let installed = installed_version(client);
    let Some(installed) = installed.filter(|v| v != LIBRARY_VERSION) else {
        return prepare();
    };
    let missing_object = [
        PgSqlErrorCode::ERRCODE_UNDEFINED_COLUMN,
        PgSqlErrorCode::ERRCODE_UNDEFINED_TABLE,
        PgSqlErrorCode::ERRCODE_UNDEFINED_FUNCTION,
        PgSqlErrorCode::ERRCODE_UNDEFINED_OBJECT,
    ];
    // Nothing the closure touches is used again if it fails: the handler
    // raises at once.
    let mut attempt = PgTryBuilder::new(std::panic::AssertUnwindSafe(prepare));
    for code in missing_object {
        let installed = installed.clone();
        attempt = attempt.catch_when(code, move |error| {
            let detail = match &error {
                pgrx::pg_sys::panic::CaughtError::PostgresError(report)
                | pgrx::pg_sys::panic::CaughtError::ErrorReport(report) => report.message().to_string(),
                _ => String::new(),
            };
            ErrorReport::new(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!(
                    "pg_distlock's SQL objects in this database are version {installed}, \
                     but its library is version {LIBRARY_VERSION}"
                ),
                "pg_distlock",
            )
            .set_detail(detail)
            .set_hint("Run ALTER EXTENSION pg_distlock UPDATE in this database.")
            .report(PgLogLevel::ERROR);
            unreachable!("ERROR does not return")
        });
    }
    attempt.execute()
}

/// Whether table `distlock.<table>` has column `column` in this database:
/// a few syscache lookups, so that a read-only call can choose the statement
/// an older release's tables support instead of failing until the update.
pub fn has_column(table: &std::ffi::CStr, column: &std::ffi::CStr) -> bool {
    let relation = table_oid(table);
    relation != pg_sys::InvalidOid && unsafe { pg_sys::get_attnum(relation, column.as_ptr()) } > 0
}

/// The OID of table `distlock.<table>`, InvalidOid when there is none.
pub fn table_oid(table: &std::ffi::CStr) -> pg_sys::Oid {
    unsafe {
        let schema = pg_sys::get_namespace_oid(c"distlock".as_ptr(), true);
        if schema == pg_sys::InvalidOid {
            return pg_sys::InvalidOid;
        }
        pg_sys::get_relname_relid(table.as_ptr(), schema)
    }
}
