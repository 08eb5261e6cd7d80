//! Whether the database has a prepared transaction: its jobs (enqueued,
//! or claimed and given back) become runnable at COMMIT or ROLLBACK
//! PREPARED, in a session that wakes no consumer and writes no runnable log
//! entry, so waiting consumers watch for them (consume.rs).

use pgrx::pg_sys;
use pgrx::spi::SpiClient;

use crate::errors::OrRaise;
use crate::plans::{first_value, plan, types};

/// Whether the server allows prepared transactions at all
/// (max_prepared_transactions is 0 by default; it changes only at a restart).
pub(crate) fn prepared_transactions_allowed() -> bool {
    thread_local! {
        static ALLOWED: std::cell::OnceCell<bool> = const { std::cell::OnceCell::new() };
    }
    ALLOWED.with(|allowed| {
        *allowed.get_or_init(|| {
            let setting = unsafe { pg_sys::GetConfigOption(c"max_prepared_transactions".as_ptr(), true, false) };
            !setting.is_null() && unsafe { std::ffi::CStr::from_ptr(setting) }.to_bytes() != b"0"
        })
    })
}

/// The transaction ids of the server's prepared transactions.
pub(crate) fn prepared_xids(client: &SpiClient<'_>) -> Vec<u32> {
    let stmt = plan(client, include_str!("../../sql/queries/prepared_xids.sql"), &[]);
    client
        .select(&*stmt, None, &[])
        .and_then(|rows| rows.map(|row| row.get::<i64>(1).map(|xid| xid.unwrap_or(0) as u32)).collect())
        .or_raise()
}

/// Whether this database has a prepared transaction (never, without a
/// server that allows them).
pub(crate) fn prepared_transactions_here(client: &SpiClient<'_>) -> bool {
    prepared_transactions_allowed() && {
        let stmt = plan(client, include_str!("../../sql/queries/queue_prepared_here.sql"), &[types::OID]);
        let database = unsafe { pg_sys::MyDatabaseId };
        client.select(&*stmt, None, &[database.into()]).and_then(first_value::<bool>).or_raise().unwrap_or(false)
    }
}
