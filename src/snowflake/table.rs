//! Table-backed generation (pg_distlock not preloaded): the worker id's row
//! in distlock.id_generator is locked once per transaction, IDs are then
//! issued from backend memory, and the last millisecond is written back
//! just before commit, one write per transaction however many IDs.

use std::cell::RefCell;
use std::collections::HashMap;


use super::clock::{now_ms, wait_until};
use super::{pack, step, unpack};
use crate::errors::OrRaise;
use crate::plans::{first_value, plan, types};

thread_local! {
    /// worker id -> last issued state, for worker ids whose row this transaction has locked.
    static LOCKED: RefCell<HashMap<i32, u64>> = RefCell::new(HashMap::new());
}

/// Locks the worker id's row and returns the first state of this transaction.
fn lock_and_start(worker_id: i32) -> u64 {
    let mark = crate::access::connect_mut(|client| {
        let ensure = plan(client, include_str!("../../sql/queries/sf_ensure_row.sql"), &[types::INT4]);
        client.update(&*ensure, None, &[worker_id.into()]).or_raise();
        let lock = plan(client, include_str!("../../sql/queries/sf_lock_mark.sql"), &[types::INT4]);
        client
            .update(&*lock, None, &[worker_id.into()])
            .and_then(first_value::<i64>)
            .or_raise()
            .unwrap_or(0)
    });
    // IDs issued by a transaction that rolled back are not in the mark; they
    // all predate our lock, so starting strictly after the moment we got it
    // (and after the mark) can never repeat them.
    let start = (super::checked_mark(worker_id, mark) + 1).max(now_ms() + 1);
    wait_until(start, worker_id);
    let state = pack(start, 0);
    LOCKED.with(|l| l.borrow_mut().insert(worker_id, state));
    crate::xact::on_outcome(
        Some(Box::new(move || write_mark(worker_id))),
        // The row lock went away with the (sub)transaction: lock again next time.
        Some(Box::new(move || {
            LOCKED.with(|l| l.borrow_mut().remove(&worker_id));
        })),
    );
    state
}

fn write_mark(worker_id: i32) {
    let Some(state) = LOCKED.with(|l| l.borrow_mut().remove(&worker_id)) else {
        return;
    };
    crate::access::connect_mut(|client| {
        let stmt = plan(client, include_str!("../../sql/queries/sf_store_mark.sql"), &[types::INT4, types::INT8]);
        client.update(&*stmt, None, &[worker_id.into(), unpack(state).0.into()]).or_raise();
    });
}

pub fn next(worker_id: i32) -> u64 {
    let Some(current) = LOCKED.with(|l| l.borrow().get(&worker_id).copied()) else {
        return lock_and_start(worker_id);
    };
    let next = loop {
        match step(current, now_ms()) {
            Ok(next) => break next,
            Err(wait_for) => {
                wait_until(wait_for, worker_id);
            }
        }
    };
    LOCKED.with(|l| l.borrow_mut().insert(worker_id, next));
    next
}
