//! key -> name memory for text lock keys, so views can show which name a
//! key came from and report two names that hash to one key.
//!
//! Names go to `distlock.lock_names` once per backend and key, in the
//! caller's transaction and with the extension owner's rights; a backend
//! first reads the names already recorded. The table has no unique
//! constraint on purpose: an insert must never wait for another session's uncommitted insert of the
//! same name (that would turn try_lock into a wait). A race can leave a
//! duplicate row, which the views fold away.
//! Nothing is written where a write would hurt the caller: on a standby, in
//! a read-only or SERIALIZABLE transaction (a read here could make the
//! caller's transaction fail with 40001).

use std::cell::RefCell;
use std::collections::HashMap;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::errors::OrRaise;
use crate::text::Text;
use crate::plans::{delete_older_than, plan, types};

thread_local! {
    /// Keys whose name this backend knows to be recorded.
    static RECORDED: RefCell<HashMap<i64, Text>> = RefCell::new(HashMap::new());
    /// Whether the names already in the table were read into RECORDED.
    static PRELOADED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How many known names a backend reads at its first miss: enough for any
/// fixed set of lock names, bounded for tables of endless one-off names.
const PRELOAD_LIMIT: i64 = 50_000;

fn already_recorded(key: i64, name: &Text) -> bool {
    RECORDED.with(|r| r.borrow().get(&key).is_some_and(|known| known == name))
}

fn writing_is_harmless() -> bool {
    unsafe {
        !pg_sys::RecoveryInProgress()
            && !pg_sys::XactReadOnly
            && pg_sys::XactIsoLevel < pg_sys::XACT_SERIALIZABLE as i32
    }
}

/// Reads up to PRELOAD_LIMIT recorded names, so that a new backend does
/// not query the table once per key.
fn preload(client: &pgrx::spi::SpiClient<'_>) {
    PRELOADED.set(true);
    let stmt = plan(
        client,
        include_str!("../../sql/queries/lock_names_preload.sql"),
        &[types::INT8],
    );
    let rows = client
        .select(&*stmt, None, &[PRELOAD_LIMIT.into()])
        .or_raise();
    RECORDED.with(|r| {
        let mut recorded = r.borrow_mut();
        for row in rows {
            if let (Ok(Some(key)), Ok(Some(name))) = (row.get::<i64>(1), row.get::<Text>(2)) {
                recorded.entry(key).or_insert(name);
            }
        }
    });
}

/// Remembers that `name` hashes to `key`, when that is cheap and harmless.
pub fn remember(key: i64, name: &Text) {
    if already_recorded(key, name) || !writing_is_harmless() {
        return;
    }
    let inserted = crate::access::connect_mut(|client| {
        if !PRELOADED.get() {
            preload(client);
            if already_recorded(key, name) {
                return false;
            }
        }
        let stmt = plan(client, include_str!("../../sql/queries/lock_name_record.sql"), &[types::INT8, types::TEXT]);
        client
            .update(&*stmt, None, &[key.into(), name.into()])
            .or_raise();
        true
    });
    if !inserted {
        return;
    }
    RECORDED.with(|r| r.borrow_mut().insert(key, name.clone()));
    // The row is gone if the caller's transaction rolls back.
    crate::xact::on_outcome(
        None,
        Some(Box::new(move || {
            RECORDED.with(|r| r.borrow_mut().remove(&key));
        })),
    );
}

/// Deletes names first seen more than `p_older_than` ago whose key nobody
/// holds or waits for now; returns how many. A backend that recorded a
/// name remembers it until it disconnects and does not record it again, so
/// a long-lived session's later locks on a pruned name show no name.
#[pg_extern]
fn prune_lock_names(p_older_than: default!(Option<Interval>, "'30 days'")) -> i64 {
    let older_than = crate::errors::retention_interval(p_older_than, "p_older_than");
    crate::access::connect_mut(|client| delete_older_than(client, include_str!("../../sql/queries/lock_names_prune.sql"), older_than))
}
