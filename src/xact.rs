//! Ties task-lock releases to transaction outcomes.
//!
//! A session-level advisory lock ignores COMMIT and ROLLBACK, which is how
//! the PL/pgSQL recipe leaks locks and double-runs tasks. pg_distlock keeps a
//! per-backend list of what the current transaction did to task locks:
//! - a claim's lock is given back if the claiming transaction (or
//!   subtransaction) aborts, since its log row is rolled back with it;
//! - a release's lock is dropped only once its transaction has committed, so
//!   the next claimant always sees the finished log row and the new
//!   `next_run_at` (if it aborts, the claim stays held and intact).

use std::cell::RefCell;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::errors::raise;
use crate::lock_keys::unlock_task;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LockAction {
    /// Taken in this transaction: undo if it aborts.
    Claimed,
    /// Released in this transaction: drop the lock once it commits.
    ReleaseAtCommit,
}

#[derive(Debug, Clone, Copy)]
struct Pending {
    task_id: i32,
    action: LockAction,
    subxact: pg_sys::SubTransactionId,
}

thread_local! {
    static PENDING: RefCell<Vec<Pending>> = const { RefCell::new(Vec::new()) };
    static HOOKS: RefCell<Vec<Hooks>> = const { RefCell::new(Vec::new()) };
}

type Action = Box<dyn FnOnce()>;

/// Work another module ties to the current (sub)transaction's outcome.
struct Hooks {
    subxact: pg_sys::SubTransactionId,
    /// Runs just before commit (or PREPARE); may use SPI and may fail.
    before_commit: Option<Action>,
    /// Runs if the (sub)transaction that registered it aborts.
    on_abort: Option<Action>,
    /// Runs once when it ends, whichever way: commit, PREPARE, or abort of
    /// the (sub)transaction that registered it. Must not fail.
    on_end: Option<Action>,
    /// Runs once the transaction has committed, when what it wrote is
    /// visible to every new snapshot. Must not fail.
    after_commit: Option<Action>,
    /// Runs once the transaction is prepared (PREPARE TRANSACTION), when
    /// COMMIT or ROLLBACK PREPARED, which may run in any session, is yet to
    /// come. Must not fail.
    at_prepare: Option<Action>,
}

fn push_hooks(hooks: Hooks) {
    HOOKS.with(|h| h.borrow_mut().push(hooks));
}

fn current_subxact() -> pg_sys::SubTransactionId {
    unsafe { pg_sys::GetCurrentSubTransactionId() }
}

/// Registers actions for the current subtransaction's outcome.
pub fn on_outcome(before_commit: Option<Action>, on_abort: Option<Action>) {
    push_hooks(Hooks {
        subxact: current_subxact(),
        before_commit,
        on_abort,
        on_end: None,
        after_commit: None,
        at_prepare: None,
    });
}

/// Registers an action for the end of the current subtransaction (or of
/// the transaction it merges into), however it ends.
pub fn at_end(action: Action) {
    push_hooks(Hooks {
        subxact: current_subxact(),
        before_commit: None,
        on_abort: None,
        on_end: Some(action),
        after_commit: None,
        at_prepare: None,
    });
}

/// Registers an action for after the transaction commits; dropped if it (or
/// the subtransaction that registered it) aborts, or is prepared.
pub fn after_commit(action: Action) {
    push_hooks(Hooks {
        subxact: current_subxact(),
        before_commit: None,
        on_abort: None,
        on_end: None,
        after_commit: Some(action),
        at_prepare: None,
    });
}

/// Registers an action for when the transaction is prepared; dropped if it
/// (or the subtransaction that registered it) aborts, or commits.
pub fn at_prepare(action: Action) {
    push_hooks(Hooks {
        subxact: current_subxact(),
        before_commit: None,
        on_abort: None,
        on_end: None,
        after_commit: None,
        at_prepare: Some(action),
    });
}

/// Forgets every hook, running the end actions (and, at a commit, the
/// after-commit ones; at a PREPARE, `committed` false, the at-prepare ones).
fn end_all(committed: bool) {
    let hooks = HOOKS.with(|h| std::mem::take(&mut *h.borrow_mut()));
    for hook in hooks {
        if let Some(action) = hook.on_end {
            action();
        }
        if let Some(action) = hook.after_commit.filter(|_| committed) {
            action();
        }
        if let Some(action) = hook.at_prepare.filter(|_| !committed) {
            action();
        }
    }
}

fn run_before_commit_hooks() {
    if HOOKS.with(|h| h.borrow().iter().all(|hook| hook.before_commit.is_none())) {
        return;
    }
    // Hooks run SQL, which needs a snapshot; at commit time none is active.
    unsafe { pg_sys::PushActiveSnapshot(pg_sys::GetTransactionSnapshot()) };
    // Taken one at a time: a hook may register more or fail half-way.
    loop {
        let next = HOOKS.with(|h| h.borrow_mut().iter_mut().find_map(|hook| hook.before_commit.take()));
        match next {
            Some(action) => action(),
            None => break,
        }
    }
    unsafe { pg_sys::PopActiveSnapshot() };
}

fn run_abort_hooks(only_subxact: Option<pg_sys::SubTransactionId>) {
    let aborted: Vec<Hooks> = HOOKS.with(|h| {
        let mut hooks = h.borrow_mut();
        let (aborted, kept) =
            hooks.drain(..).partition(|hook| only_subxact.is_none_or(|id| hook.subxact == id));
        *hooks = kept;
        aborted
    });
    for hook in aborted {
        if let Some(action) = hook.on_abort {
            action();
        }
        if let Some(action) = hook.on_end {
            action();
        }
    }
}

fn push(task_id: i32, action: LockAction) {
    let subxact = unsafe { pg_sys::GetCurrentSubTransactionId() };
    PENDING.with(|p| p.borrow_mut().push(Pending { task_id, action, subxact }));
}

/// Records that this transaction took `task_id`'s session lock for a claim.
pub fn claimed_in_this_transaction(task_id: i32) {
    push(task_id, LockAction::Claimed);
}

/// Forgets the newest claim record of `task_id` (the claim was given back at once).
pub fn forget_claim(task_id: i32) {
    PENDING.with(|p| {
        let mut pending = p.borrow_mut();
        if let Some(i) =
            pending.iter().rposition(|e| e.task_id == task_id && e.action == LockAction::Claimed)
        {
            pending.remove(i);
        }
    });
}

/// Schedules `task_id`'s session lock to be dropped when this transaction commits.
pub fn release_at_commit(task_id: i32) {
    push(task_id, LockAction::ReleaseAtCommit);
}

/// Whether this transaction already released `task_id` (the lock is still held until commit).
pub fn released_in_this_transaction(task_id: i32) -> bool {
    PENDING.with(|p| {
        p.borrow().iter().any(|e| e.task_id == task_id && e.action == LockAction::ReleaseAtCommit)
    })
}

fn drain_and_unlock(undo: LockAction) {
    let pending = PENDING.with(|p| std::mem::take(&mut *p.borrow_mut()));
    for entry in pending.iter().filter(|e| e.action == undo) {
        unlock_task(entry.task_id);
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_xact_event(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        XACT_EVENT_PRE_COMMIT | XACT_EVENT_PARALLEL_PRE_COMMIT => run_before_commit_hooks(),
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => {
            end_all(true);
            drain_and_unlock(LockAction::ReleaseAtCommit)
        }
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT => {
            run_abort_hooks(None);
            drain_and_unlock(LockAction::Claimed)
        }
        XACT_EVENT_PREPARE => end_all(false),
        XACT_EVENT_PRE_PREPARE => {
            run_before_commit_hooks();
            if PENDING.with(|p| !p.borrow().is_empty()) {
                raise(
                    PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
                    "cannot PREPARE a transaction that claimed or released a pg_distlock task",
                );
            }
        }
        _ => {}
    }
}

#[pg_guard]
unsafe extern "C-unwind" fn on_subxact_event(
    event: pg_sys::SubXactEvent::Type,
    my_subid: pg_sys::SubTransactionId,
    parent_subid: pg_sys::SubTransactionId,
    _arg: *mut std::ffi::c_void,
) {
    use pg_sys::SubXactEvent::*;
    match event {
        SUBXACT_EVENT_COMMIT_SUB => {
            PENDING.with(|p| {
                for entry in p.borrow_mut().iter_mut().filter(|e| e.subxact == my_subid) {
                    entry.subxact = parent_subid;
                }
            });
            HOOKS.with(|h| {
                for hook in h.borrow_mut().iter_mut().filter(|hook| hook.subxact == my_subid) {
                    hook.subxact = parent_subid;
                }
            });
        }
        SUBXACT_EVENT_ABORT_SUB => {
            run_abort_hooks(Some(my_subid));
            let aborted: Vec<Pending> = PENDING.with(|p| {
                let mut pending = p.borrow_mut();
                let (aborted, kept) = pending.drain(..).partition(|e| e.subxact == my_subid);
                *pending = kept;
                aborted
            });
            for entry in aborted.iter().filter(|e| e.action == LockAction::Claimed) {
                unlock_task(entry.task_id);
            }
        }
        _ => {}
    }
}

pub fn register_callbacks() {
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact_event), std::ptr::null_mut());
        pg_sys::RegisterSubXactCallback(Some(on_subxact_event), std::ptr::null_mut());
    }
}
