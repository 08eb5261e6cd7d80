//! What this backend holds through pg_distlock lock calls: unlock_all gives
//! back exactly these session holds, and telemetry learns when a key stops
//! being held (unlock, end of transaction, or end of the session).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;

use pgrx::pg_sys;

use super::manager::{self, Hold};
use super::stats::{self, Event};

thread_local! {
    /// Session-level holds per (key, shared): how many times taken.
    static SESSION: RefCell<HashMap<(i64, bool), u32>> = RefCell::new(HashMap::new());
    /// All holds per key, session and transaction level together.
    static PER_KEY: RefCell<HashMap<i64, u32>> = RefCell::new(HashMap::new());
    static EXIT_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// Counts one more hold of `key`; true when it is the backend's first.
fn add(key: i64, shared: bool) -> bool {
    super::owners::took(key, shared);
    PER_KEY.with(|m| {
        let mut m = m.borrow_mut();
        let count = m.entry(key).or_insert(0);
        *count += 1;
        let first = *count == 1;
        crate::session_locks::set_lock_keys(m.len());
        first
    })
}

/// Counts `n` fewer holds of `key` in mode `shared`, telling telemetry when
/// none is left.
fn remove(key: i64, shared: bool, n: u32) {
    super::owners::gave_back(key, shared, Some(n));
    let ended = PER_KEY.with(|m| {
        let mut m = m.borrow_mut();
        match m.get_mut(&key) {
            Some(count) if *count > n => {
                *count -= n;
                false
            }
            Some(_) => {
                m.remove(&key);
                crate::session_locks::set_lock_keys(m.len());
                true
            }
            None => false,
        }
    });
    if ended {
        stats::record(key, Event::HoldEnded);
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn end_holds_at_exit(_code: i32, _arg: pg_sys::Datum) {
    // The lock manager drops session locks at exit; telemetry must too.
    let keys: Vec<i64> = PER_KEY.with(|m| m.borrow_mut().drain().map(|(key, _)| key).collect());
    crate::session_locks::set_lock_keys(0);
    for key in keys {
        stats::record(key, Event::HoldEnded);
    }
}

fn ensure_exit_callback() {
    if !EXIT_CALLBACK.get() {
        unsafe { pg_sys::before_shmem_exit(Some(end_holds_at_exit), pg_sys::Datum::from(0)) };
        EXIT_CALLBACK.set(true);
    }
}

/// Whether this backend holds `key` through a lock call.
pub fn holds_key(key: i64) -> bool {
    PER_KEY.with(|m| m.borrow().contains_key(&key))
}

/// Notes a granted hold; returns whether it is the backend's first of the key.
pub fn granted(hold: Hold) -> bool {
    ensure_exit_callback();
    let first = add(hold.key, hold.shared);
    if hold.xact {
        // The lock manager releases it when the (sub)transaction ends.
        let (key, shared) = (hold.key, hold.shared);
        crate::xact::at_end(Box::new(move || remove(key, shared, 1)));
    } else {
        SESSION.with(|m| *m.borrow_mut().entry((hold.key, hold.shared)).or_insert(0) += 1);
    }
    first
}

/// Drops one session hold of (key, shared); false when none was held.
pub fn release(key: i64, shared: bool) -> bool {
    let released = manager::release(key, shared);
    let tracked = SESSION.with(|m| {
        let mut m = m.borrow_mut();
        let Some(count) = m.get(&(key, shared)).copied() else {
            return 0;
        };
        if released && count > 1 {
            m.insert((key, shared), count - 1);
            return 1;
        }
        m.remove(&(key, shared));
        // Not released: they were dropped behind our back (pg_advisory_unlock_all).
        if released {
            1
        } else {
            count
        }
    });
    if tracked > 0 {
        remove(key, shared, tracked);
    }
    released
}

/// Gives back every session hold taken through pg_distlock lock calls;
/// returns how many holds were released.
pub fn release_all() -> i64 {
    let holds: Vec<((i64, bool), u32)> = SESSION.with(|m| m.borrow_mut().drain().collect());
    let mut released = 0i64;
    for ((key, shared), count) in holds {
        for _ in 0..count {
            if !manager::release(key, shared) {
                break;
            }
            released += 1;
        }
        remove(key, shared, count);
    }
    released
}
