//! Internal subtransactions, as a PL/pgSQL block with an exception handler
//! runs its statements: entered and left without leaving the caller's
//! memory context and resource owner behind.

use std::panic::AssertUnwindSafe;

use pgrx::pg_sys;
use pgrx::pg_sys::panic::CaughtError;
use pgrx::pg_sys::PgTryBuilder;

/// An internal subtransaction entered by `begin`; the caller's memory
/// context stays current inside it.
#[derive(Clone, Copy)]
pub struct Subtransaction {
    caller_context: pg_sys::MemoryContext,
    caller_owner: pg_sys::ResourceOwner,
}

pub fn begin() -> Subtransaction {
    unsafe {
        let entered =
            Subtransaction { caller_context: pg_sys::CurrentMemoryContext, caller_owner: pg_sys::CurrentResourceOwner };
        pg_sys::BeginInternalSubTransaction(std::ptr::null());
        pg_sys::MemoryContextSwitchTo(entered.caller_context);
        entered
    }
}

impl Subtransaction {
    /// Keeps what it did, as part of the enclosing transaction.
    pub fn release(self) {
        unsafe { pg_sys::ReleaseCurrentSubTransaction() };
        self.back_to_caller();
    }

    /// Undoes what it did; the row and heavyweight locks it took bind no one.
    pub fn roll_back(self) {
        unsafe { pg_sys::RollbackAndReleaseCurrentSubTransaction() };
        self.back_to_caller();
    }

    fn back_to_caller(self) {
        unsafe {
            pg_sys::MemoryContextSwitchTo(self.caller_context);
            pg_sys::CurrentResourceOwner = self.caller_owner;
        }
    }
}

/// Runs `statements` in an internal subtransaction, kept when `keep` says
/// so of their result and rolled back otherwise. An error rolls it back
/// and goes on up.
pub fn run_keeping_if<R>(statements: impl FnOnce() -> R, keep: impl FnOnce(&R) -> bool) -> R {
    let entered = begin();
    let result = PgTryBuilder::new(AssertUnwindSafe(statements))
        .catch_others(move |error: CaughtError| {
            unsafe { pg_sys::FlushErrorState() };
            entered.roll_back();
            error.rethrow()
        })
        .execute();
    if keep(&result) {
        entered.release();
    } else {
        entered.roll_back();
    }
    result
}
