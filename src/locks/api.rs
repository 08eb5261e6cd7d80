//! The SQL functions. Text keys become `distlock.lock_id(key)`, the same
//! bigint key space as `pg_advisory_lock(bigint)`.

use crate::text::{self, Text};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use super::manager::{self, Hold, Outcome, Wait};
use super::stats::{self, Event};
use super::{holds, names};
use crate::errors::{interval_micros, raise, required};

fn text_key(p_key: Option<Text>) -> (i64, Text) {
    let name = text::name(p_key, "p_key");
    (crate::hashing::key_for_name(name.bytes()), name)
}

fn wait_for(p_timeout: Option<Interval>) -> Wait {
    let Some(timeout) = p_timeout else {
        return Wait::Unbounded;
    };
    let micros = interval_micros(&timeout);
    if micros < 0 {
        raise(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("p_timeout must not be negative, got {timeout}"),
        );
    }
    if micros == 0 {
        return Wait::No;
    }
    // The lock manager's timeout is in whole milliseconds: round up.
    Wait::UpTo(((micros + 999) / 1000).min(i32::MAX as i128) as i32)
}

fn take(
    key: i64,
    name: Option<Text>,
    wait: Wait,
    shared: Option<bool>,
    xact: Option<bool>,
) -> bool {
    let hold = Hold {
        key,
        shared: required(shared, "p_shared"),
        xact: required(xact, "p_xact"),
    };
    if !holds::holds_key(key) {
        crate::session_locks::require_room_for_one_more(|| match &name {
            Some(name) => format!("cannot lock \"{name}\""),
            None => format!("cannot lock key {key}"),
        });
    }
    if let Some(name) = &name {
        names::remember(key, name);
    }
    let what = || match &name {
        Some(name) => format!("lock \"{name}\""),
        None => format!("lock key {key}"),
    };
    match manager::acquire(hold, wait, &what) {
        Outcome::Granted { waited_us } => {
            let begins_hold = holds::granted(hold);
            stats::record(key, Event::Acquired { waited_us, begins_hold });
            true
        }
        Outcome::Busy => {
            stats::record(key, Event::FailedTry);
            false
        }
        Outcome::TimedOut(waited) => {
            stats::record(key, Event::TimedOut { waited_us: waited });
            false
        }
    }
}

/// Takes the advisory lock of `p_key` (exclusive, or shared with
/// `p_shared`; until unlock, or until the transaction ends with `p_xact`),
/// waiting in the lock manager up to `p_timeout` (NULL: no pg_distlock
/// limit). False when the wait timed out; the lock is then not held.
#[pg_extern(name = "lock", volatile, parallel_unsafe)]
fn lock_text(
    p_key: Option<Text>,
    p_timeout: default!(Option<Interval>, "NULL"),
    p_shared: default!(Option<bool>, false),
    p_xact: default!(Option<bool>, false),
) -> bool {
    let (key, name) = text_key(p_key);
    take(key, Some(name), wait_for(p_timeout), p_shared, p_xact)
}

/// `distlock.lock` for a bigint key: the lock of `pg_advisory_lock(p_key)`.
#[pg_extern(name = "lock", volatile, parallel_unsafe)]
fn lock_bigint(
    p_key: Option<i64>,
    p_timeout: default!(Option<Interval>, "NULL"),
    p_shared: default!(Option<bool>, false),
    p_xact: default!(Option<bool>, false),
) -> bool {
    take(
        required(p_key, "p_key"),
        None,
        wait_for(p_timeout),
        p_shared,
        p_xact,
    )
}

/// Takes the lock of `p_key` only if it is free right now.
#[pg_extern(name = "try_lock", volatile, parallel_unsafe)]
fn try_lock_text(
    p_key: Option<Text>,
    p_shared: default!(Option<bool>, false),
    p_xact: default!(Option<bool>, false),
) -> bool {
    let (key, name) = text_key(p_key);
    take(key, Some(name), Wait::No, p_shared, p_xact)
}

#[pg_extern(name = "try_lock", volatile, parallel_unsafe)]
fn try_lock_bigint(
    p_key: Option<i64>,
    p_shared: default!(Option<bool>, false),
    p_xact: default!(Option<bool>, false),
) -> bool {
    take(required(p_key, "p_key"), None, Wait::No, p_shared, p_xact)
}

/// Releases one session-level hold of `p_key`; false when this session
/// held none (transaction-level locks end with their transaction).
#[pg_extern(name = "unlock", volatile, parallel_unsafe)]
fn unlock_text(p_key: Option<Text>, p_shared: default!(Option<bool>, false)) -> bool {
    let (key, _) = text_key(p_key);
    holds::release(key, required(p_shared, "p_shared"))
}

#[pg_extern(name = "unlock", volatile, parallel_unsafe)]
fn unlock_bigint(p_key: Option<i64>, p_shared: default!(Option<bool>, false)) -> bool {
    holds::release(required(p_key, "p_key"), required(p_shared, "p_shared"))
}

/// Releases every session-level hold this session took with distlock.lock
/// or try_lock (task claims and plain pg_advisory_lock calls are left
/// alone). Returns how many holds were released.
#[pg_extern(volatile, parallel_unsafe)]
fn unlock_all() -> i64 {
    holds::release_all()
}
