//! Shared-memory generation: one atomic (ms, sequence) per worker id, and a
//! reservation of time ahead persisted in the server-wide marks file.

use std::sync::atomic::Ordering;

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::clock::{now_ms, wait_until};
use super::{marks, pack, step, MAX_SEQUENCE};
use crate::errors::OrRaise;
use crate::plans::{first_value, plan, types};
use crate::shared::{self, SnowflakeSlot};

/// How far ahead a reservation reaches. After a restart the first ID of a
/// worker id may wait up to this long for the clock to pass the reservation.
const RESERVATION_MS: i64 = 100;

/// A mark 0.1.0 kept in this database's distlock.id_generator (it persisted
/// memory-mode marks there), so a server upgraded in place resumes above it.
fn table_mark(client: &SpiClient<'_>, worker_id: i32) -> i64 {
    let stmt = plan(client, include_str!("../../sql/queries/sf_mark.sql"), &[types::INT4]);
    client
        .select(&*stmt, None, &[worker_id.into()])
        .and_then(first_value::<i64>)
        .or_raise()
        .unwrap_or(0)
}

/// After a restart: resume above the persisted mark.
fn load(slot: &SnowflakeSlot, worker_id: i32) {
    let mark = marks::read(worker_id).max(crate::access::connect(|client| table_mark(client, worker_id)));
    let mark = super::checked_mark(worker_id, mark);
    slot.state.fetch_max(pack(mark, MAX_SEQUENCE), Ordering::AcqRel);
    slot.reserved_until.fetch_max(mark, Ordering::AcqRel);
    slot.loaded.store(true, Ordering::Release);
}

/// Clears the slot's writer flag however the write ends (an ERROR unwinds).
struct Writing<'a>(&'a SnowflakeSlot);

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        self.0.persisting.store(false, Ordering::Release);
    }
}

/// Makes sure IDs up to `ms` are covered by a persisted reservation,
/// extending it ahead of time so that this rarely waits. One backend at a
/// time writes a worker id's mark; the others go on while their IDs are
/// covered and wait for the write (about an fsync) only when they are not.
fn reserve(slot: &SnowflakeSlot, worker_id: i32, ms: i64) {
    loop {
        let reserved = slot.reserved_until.load(Ordering::Acquire);
        if ms + RESERVATION_MS / 2 <= reserved {
            return;
        }
        if slot.persisting.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            let _writing = Writing(slot);
            let target = (ms + RESERVATION_MS).max(slot.reserved_until.load(Ordering::Acquire));
            marks::write(worker_id, target);
            slot.reserved_until.fetch_max(target, Ordering::AcqRel);
            return;
        }
        if ms <= reserved {
            return; // covered; another backend is extending the reservation
        }
        check_for_interrupts!();
        unsafe { pg_sys::pg_usleep(100) };
    }
}

/// The next (ms, sequence) state for `worker_id`, or None without shared
/// memory. The common case is one compare-and-swap and no I/O.
pub fn next(worker_id: i32) -> Option<u64> {
    let slot = shared::snowflake_slot(worker_id as usize)?;
    if !slot.loaded.load(Ordering::Acquire) {
        load(slot, worker_id);
    }
    let issued = loop {
        let current = slot.state.load(Ordering::Acquire);
        match step(current, now_ms()) {
            Ok(next) => {
                if slot.state.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                    break next;
                }
            }
            Err(wait_for) => {
                wait_until(wait_for, worker_id);
            }
        }
    };
    let ms = super::unpack(issued).0;
    if ms + RESERVATION_MS / 2 > slot.reserved_until.load(Ordering::Acquire) {
        reserve(slot, worker_id, ms);
    }
    Some(issued)
}
