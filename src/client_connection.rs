//! Whether this backend's client is still there, for a call that waits in
//! the server: PostgreSQL notices a closed connection only when it next
//! reads from it (or every `client_connection_check_interval`, off by
//! default), so a consumer whose client died while it waited would wake,
//! claim a job and commit it for nobody.

use pgrx::pg_sys;

/// Waits on this backend's latch for up to `ms` milliseconds, reporting
/// `wait_event`, and resets it; the wait also ends when the client's
/// connection closes. True when the client is gone.
pub fn wait_latch(ms: i64, wait_event: u32) -> bool {
    let socket = client_socket();
    let mut events = pg_sys::WL_LATCH_SET | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH;
    if socket.is_some() {
        events |= pg_sys::WL_SOCKET_CLOSED;
    }
    let happened = unsafe {
        let happened = pg_sys::WaitLatchOrSocket(
            pg_sys::MyLatch,
            events as i32,
            socket.unwrap_or(pg_sys::PGINVALID_SOCKET),
            ms as std::ffi::c_long,
            wait_event,
        );
        pg_sys::ResetLatch(pg_sys::MyLatch);
        happened as u32
    };
    if happened & pg_sys::WL_SOCKET_CLOSED != 0 {
        return true;
    }
    // A wait that ends with the latch set and the close pending reports
    // the latch alone: look at the socket once more, without waiting.
    socket.is_some() && happened & pg_sys::WL_LATCH_SET != 0 && client_gone()
}

/// Whether the client's connection has closed, looked at without waiting
/// (false when this backend has no client socket to watch).
pub fn client_gone() -> bool {
    let Some(socket) = client_socket() else { return false };
    let happened = unsafe {
        pg_sys::WaitLatchOrSocket(
            std::ptr::null_mut(),
            // PostgreSQL asserts that a backend's wait names postmaster death.
            (pg_sys::WL_SOCKET_CLOSED | pg_sys::WL_TIMEOUT | pg_sys::WL_EXIT_ON_PM_DEATH) as i32,
            socket,
            0,
            pg_sys::PG_WAIT_CLIENT,
        ) as u32
    };
    happened & pg_sys::WL_SOCKET_CLOSED != 0
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
