//! The claims this backend holds: task id -> (log row, worker id, role).
//!
//! A task lock is session-level, so only this backend can hold its claims,
//! and it learns each log row when it makes the claim. Remembering it lets a
//! release go straight to its row by primary key. Entries follow the
//! transaction outcome: a claim that rolls back is forgotten, a release that
//! rolls back is remembered again.

use std::cell::RefCell;
use std::collections::HashMap;

use crate::text::Text;
use crate::xact;

#[derive(Debug, Clone)]
pub struct Held {
    pub log_id: i64,
    pub worker: Text,
    /// The role that claimed it.
    pub role: pgrx::pg_sys::Oid,
}

thread_local! {
    static HELD: RefCell<HashMap<i32, Held>> = RefCell::new(HashMap::new());
}

pub fn get(task_id: i32) -> Option<Held> {
    HELD.with(|h| h.borrow().get(&task_id).cloned())
}

/// Records a claim made in the current transaction.
pub fn claimed(task_id: i32, held: Held) {
    HELD.with(|h| h.borrow_mut().insert(task_id, held));
    count_changed();
    xact::on_outcome(
        None,
        Some(Box::new(move || {
            HELD.with(|h| h.borrow_mut().remove(&task_id));
            count_changed();
        })),
    );
}

fn count_changed() {
    crate::session_locks::set_task_claims(HELD.with(|h| h.borrow().len()));
}

/// Forgets a claim ended in the current transaction (remembered again if it aborts).
pub fn released(task_id: i32) {
    if let Some(held) = HELD.with(|h| h.borrow_mut().remove(&task_id)) {
        count_changed();
        xact::on_outcome(
            None,
            Some(Box::new(move || {
                HELD.with(|h| h.borrow_mut().insert(task_id, held));
                count_changed();
            })),
        );
    }
}

/// Forgets a claim whose lock this session no longer holds (released behind
/// pg_distlock's back): not remembered again whatever the transaction does.
pub fn lost(task_id: i32) {
    if HELD.with(|h| h.borrow_mut().remove(&task_id)).is_some() {
        count_changed();
    }
}
