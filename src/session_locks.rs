//! The per-session cap on the locks pg_distlock takes for a session
//! (`distlock.lock` keys and session-mode task claims together). Every
//! session draws its locks from one shared lock table, sized by
//! max_locks_per_transaction; a session hoarding keys would make everyone
//! else's lock attempts fail with "out of shared memory". The cap stops the
//! hoarder first, with an error naming the setting.

use std::cell::Cell;

use pgrx::PgSqlErrorCode;

use crate::errors::raise_with_hint;

// locks::holds and tasks::held report their counts here (rather than this
// module asking them), so that neither points back up to the other.
thread_local! {
    static LOCK_KEYS: Cell<usize> = const { Cell::new(0) };
    static TASK_CLAIMS: Cell<usize> = const { Cell::new(0) };
}

/// Keys this session holds through lock calls (session or transaction level).
pub fn set_lock_keys(n: usize) {
    LOCK_KEYS.set(n);
}

/// Session-mode task claims this session holds.
pub fn set_task_claims(n: usize) {
    TASK_CLAIMS.set(n);
}

/// Raises 53400 when one more lock would exceed distlock.max_locks_per_session.
pub fn require_room_for_one_more(what: impl FnOnce() -> String) {
    if is_full() {
        raise_full(what());
    }
}

/// Whether this session holds as many locks as distlock.max_locks_per_session allows.
pub fn is_full() -> bool {
    let cap = crate::gucs::MAX_LOCKS_PER_SESSION.get();
    cap > 0 && held() >= cap as usize
}

fn held() -> usize {
    LOCK_KEYS.get() + TASK_CLAIMS.get()
}

pub fn raise_full(what: String) -> ! {
    raise_with_hint(
        PgSqlErrorCode::ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
        format!(
            "{what}: this session already holds {} pg_distlock locks (distlock.max_locks_per_session = {})",
            held(),
            crate::gucs::MAX_LOCKS_PER_SESSION.get()
        ),
        "Release locks or task claims first. A superuser may raise the setting; the server's lock table \
         holds max_locks_per_transaction * (max_connections + max_prepared_transactions) locks for everyone.",
    )
}
