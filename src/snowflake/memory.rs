//! Shared-memory generation: one atomic (ms, sequence) per worker id, and a
//! reservation of time ahead persisted in distlock.id_generator.

use std::sync::atomic::Ordering;

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::clock::{now_ms, wait_until};
use super::{pack, step, MAX_SEQUENCE};
use crate::errors::OrRaise;
use crate::plans::{first_value, plan, types};
use crate::shared::{self, SnowflakeSlot};

/// How far ahead a reservation reaches. After a restart the first ID of a
/// worker id may wait up to this long for the clock to pass the reservation.
const RESERVATION_MS: i64 = 100;


/// After a restart: resume above the persisted mark.
fn load(client: &SpiClient<'_>, slot: &SnowflakeSlot, worker_id: i32) {
    let stmt = plan(client, include_str!("../../sql/queries/sf_mark.sql"), &[types::INT4]);
    let mark = client
        .select(&*stmt, None, &[worker_id.into()])
        .and_then(first_value::<i64>)
        .or_raise()
        .unwrap_or(0);
    let mark = super::checked_mark(worker_id, mark);
    slot.state.fetch_max(pack(mark, MAX_SEQUENCE), Ordering::AcqRel);
    slot.reserved_until.fetch_max(mark, Ordering::AcqRel);
    slot.loaded.store(true, Ordering::Release);
}

/// Makes sure IDs up to `ms` are covered by a persisted reservation,
/// extending it ahead of time so that this rarely waits.
fn reserve(client: &SpiClient<'_>, slot: &'static SnowflakeSlot, worker_id: i32, ms: i64) {
    let reserved = slot.reserved_until.load(Ordering::Acquire);
    if ms + RESERVATION_MS / 2 <= reserved {
        return;
    }
    let target = ms + RESERVATION_MS;
    let wrote = if ms > reserved {
        // Not covered at all: this ID must not be returned before its mark is written.
        let stmt = plan(client, include_str!("../../sql/queries/sf_store_mark.sql"), &[types::INT4, types::INT8]);
        client.select(&*stmt, None, &[worker_id.into(), target.into()]).or_raise();
        true
    } else {
        let stmt = plan(client, include_str!("../../sql/queries/sf_try_store_mark.sql"), &[types::INT4, types::INT8]);
        client
            .select(&*stmt, None, &[worker_id.into(), target.into()])
            .map(|rows| !rows.is_empty())
            .or_raise()
    };
    if wrote {
        slot.reserved_until.fetch_max(target, Ordering::AcqRel);
        // The mark is only durable if this transaction commits.
        crate::xact::on_outcome(
            None,
            Some(Box::new(move || {
                slot.reserved_until.fetch_min(reserved, Ordering::AcqRel);
            })),
        );
    }
}

/// The next (ms, sequence) state for `worker_id`, or None without shared
/// memory. The common case is one compare-and-swap and no SQL.
pub fn next(worker_id: i32) -> Option<u64> {
    let slot = shared::snowflake_slot(worker_id as usize)?;
    if !slot.loaded.load(Ordering::Acquire) {
        Spi::connect(|client| load(client, slot, worker_id));
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
        Spi::connect(|client| reserve(client, slot, worker_id, ms));
    }
    Some(issued)
}
