//! The one way pg_distlock reports bad input: an ERROR with a SQLSTATE.

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

/// Raises an ERROR with `code`; never returns.
pub fn raise(code: PgSqlErrorCode, message: impl Into<String>) -> ! {
    ErrorReport::new(code, message.into(), "pg_distlock").report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// Raises an ERROR with `code` and a hint telling the user what to do.
pub fn raise_with_hint(code: PgSqlErrorCode, message: impl Into<String>, hint: &str) -> ! {
    ErrorReport::new(code, message.into(), "pg_distlock")
        .set_hint(hint)
        .report(PgLogLevel::ERROR);
    unreachable!("ERROR does not return")
}

/// The value of a non-nullable argument, or ERROR 22004 naming it.
pub fn required<T>(value: Option<T>, argument: &str) -> T {
    match value {
        Some(value) => value,
        None => raise(
            PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
            format!("{argument} must not be NULL"),
        ),
    }
}

/// A worker id: not NULL (22004) and not blank (22023).
pub fn worker_id<'a>(value: Option<&'a str>, argument: &str) -> &'a str {
    let worker = required(value, argument);
    if worker.trim().is_empty() {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("{argument} must not be empty, got \"{worker}\""),
        );
    }
    worker
}

/// Claims are refused on a standby: advisory locks are not replicated, so a
/// lock taken there would protect nothing.
pub fn require_primary(action: &str) {
    if unsafe { pg_sys::RecoveryInProgress() } {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_READ_ONLY_SQL_TRANSACTION,
            format!("pg_distlock cannot {action} on a standby server"),
            "Advisory locks are not replicated; connect workers to the primary.",
        );
    }
}
