//! Whether this backend's client is still there, for a call that waits in
//! the server: PostgreSQL notices a closed connection only when it next
//! reads from it (or every `client_connection_check_interval`, off by
//! default), so a consumer whose client died while it waited would wake,
//! claim a job and commit it for nobody.

use std::cell::Cell;

use pgrx::pg_sys;

/// This backend's wait set: its latch, postmaster death and, when it has
/// one, its client's socket (watched for a close). Made at the first wait
/// and kept for the backend's life, as PostgreSQL keeps its own FeBeWaitSet:
/// a set made for each wait (WaitLatchOrSocket) costs an epoll instance and
/// its registrations, five system calls, on every wake-up of a waiting
/// consumer (issue 45's latency row).
#[derive(Clone, Copy)]
struct WaitSet {
    set: *mut pg_sys::WaitEventSet,
    latch_position: i32,
    watches_client: bool,
}

thread_local! {
    static WAIT_SET: Cell<Option<WaitSet>> = const { Cell::new(None) };
}

/// The number of events the set holds, and the most one wait reports.
const EVENTS: usize = 3;

fn wait_set() -> WaitSet {
    if let Some(set) = WAIT_SET.with(Cell::get) {
        return set;
    }
    let socket = client_socket();
    let made = unsafe {
        let set = crate::pg_compat::create_backend_wait_set(EVENTS as i32);
        let latch_position =
            pg_sys::AddWaitEventToSet(set, pg_sys::WL_LATCH_SET, pg_sys::PGINVALID_SOCKET, pg_sys::MyLatch, std::ptr::null_mut());
        // PostgreSQL asserts that a backend's wait names postmaster death.
        pg_sys::AddWaitEventToSet(set, pg_sys::WL_EXIT_ON_PM_DEATH, pg_sys::PGINVALID_SOCKET, std::ptr::null_mut(), std::ptr::null_mut());
        if let Some(socket) = socket {
            pg_sys::AddWaitEventToSet(set, pg_sys::WL_SOCKET_CLOSED, socket, std::ptr::null_mut(), std::ptr::null_mut());
        }
        WaitSet { set, latch_position, watches_client: socket.is_some() }
    };
    WAIT_SET.with(|cell| cell.set(Some(made)));
    made
}

/// Waits on the set for up to `ms` milliseconds with the latch `latch`
/// watched (none: not), reporting `wait_event`; what happened, as WL_ bits.
fn wait_on(set: WaitSet, latch: *mut pg_sys::Latch, ms: i64, wait_event: u32) -> u32 {
    let mut occurred = [pg_sys::WaitEvent::default(); EVENTS];
    unsafe {
        // Only the latch pointer changes: no system call.
        pg_sys::ModifyWaitEvent(set.set, set.latch_position, pg_sys::WL_LATCH_SET, latch);
        let count =
            pg_sys::WaitEventSetWait(set.set, ms as std::ffi::c_long, occurred.as_mut_ptr(), EVENTS as i32, wait_event);
        occurred[..count.max(0) as usize].iter().fold(0, |happened, event| happened | event.events)
    }
}

/// Waits on this backend's latch for up to `ms` milliseconds, reporting
/// `wait_event`, and resets it; the wait also ends when the client's
/// connection closes. True when the client is gone.
pub fn wait_latch(ms: i64, wait_event: u32) -> bool {
    let set = wait_set();
    let happened = wait_on(set, unsafe { pg_sys::MyLatch }, ms, wait_event);
    unsafe { pg_sys::ResetLatch(pg_sys::MyLatch) };
    if happened & pg_sys::WL_SOCKET_CLOSED != 0 {
        return true;
    }
    // A wait that finds the latch already set reports the latch alone,
    // without polling: look at the socket once more, without waiting.
    set.watches_client && happened & pg_sys::WL_LATCH_SET != 0 && client_gone()
}

/// Whether the client's connection has closed, looked at without waiting
/// (false when this backend has no client socket to watch).
pub fn client_gone() -> bool {
    let set = wait_set();
    if !set.watches_client {
        return false;
    }
    // The latch is left out of this look: a set latch would end it before
    // the socket is polled. The next wait_latch watches it again.
    wait_on(set, std::ptr::null_mut(), 0, pg_sys::PG_WAIT_CLIENT) & pg_sys::WL_SOCKET_CLOSED != 0
}

/// Ends the backend as PostgreSQL does when it finds its client gone:
/// FATAL "connection to client lost", nothing sent.
pub fn leave_as_client_lost() -> ! {
    unsafe {
        pg_sys::ClientConnectionLost = 1;
        pg_sys::InterruptPending = 1;
        pg_sys::ProcessInterrupts();
    }
    // Interrupts are held off (a caller's critical code): end the call instead.
    crate::errors::raise(pgrx::PgSqlErrorCode::ERRCODE_CONNECTION_FAILURE, "connection to client lost")
}

/// The client's socket, when it has one and this platform reports a
/// closed connection without reading (Linux's epoll does).
fn client_socket() -> Option<pg_sys::pgsocket> {
    unsafe {
        let port = pg_sys::MyProcPort;
        // pgrx leaves Port opaque; `sock` is its first member in every
        // supported version (libpq-be.h of 15, 17 and 18).
        (!port.is_null() && pg_sys::WaitEventSetCanReportClosed()).then(|| *port.cast::<pg_sys::pgsocket>())
    }
}
