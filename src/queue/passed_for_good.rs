//! Which of the live rows a read from the head saw and passed over the next
//! read from the head passes over again: jobs of a paused or limited queue
//! for a claim of every queue, jobs outside a scoped caller's scope. The
//! others it passed over were locked by other transactions, and go once the
//! xmin horizon has passed the read (claim_start.rs).

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::entries_read::SteppedOver;
use super::place::Place;
use crate::errors::OrRaise;
use crate::plans::in_snapshot::{first_int8_in, HeldSnapshot};
use crate::plans::{first_value, plan, types};
use crate::scopes::Scope;
use crate::text::Text;

/// After the index: the lowest priority, the latest time, the highest id.
const TAIL: Place = Place { priority: i32::MIN, run_after: pg_sys::TimestampTz::MAX, id: i64::MAX };

/// A read from the head that has just run in this transaction: of queue
/// `named` (None: every queue), at `now`, for a caller of `scope`, up to
/// `end` (its last job, when that is known), in `snapshot` (taken right
/// before it).
pub(crate) struct HeadReadDone<'a> {
    pub named: Option<&'a Text>,
    pub scope: &'a Scope,
    pub now: TimestampWithTimeZone,
    pub end: Option<Place>,
    pub snapshot: &'a HeldSnapshot,
}

/// `stepped_over` with its passed rows split: those a later read passes
/// over again stay passed, the rest count as versions it could not see.
/// Counting reads the claim's index from the head over as many live rows
/// as the read passed over, no further than its end, only when something
/// can make a claim pass over a live row for good. It counts in the read's
/// snapshot: jobs committed while the read ran, which it did not see, would
/// otherwise fill the count and leave out what it passed over.
pub(crate) fn split_passed(client: &SpiClient<'_>, stepped_over: SteppedOver, read: HeadReadDone<'_>) -> SteppedOver {
    if stepped_over.passed == 0 {
        return stepped_over;
    }
    let scope = read.scope.as_parameter();
    let end = read.end.unwrap_or(TAIL);
    let mut arguments = vec![
        stepped_over.passed.into(),
        read.now.into(),
        scope.clone().into(),
        end.priority.into(),
        // The tail's time is PostgreSQL's infinity.
        end.run_after_timestamp().into(),
        end.id.into(),
    ];
    const EVERY: [pgrx::PgOid; 6] =
        [types::INT8, types::TIMESTAMPTZ, types::TEXT_ARRAY, types::INT4, types::TIMESTAMPTZ, types::INT8];
    const ONE_QUEUE: [pgrx::PgOid; 7] =
        [types::INT8, types::TIMESTAMPTZ, types::TEXT_ARRAY, types::INT4, types::TIMESTAMPTZ, types::INT8, types::TEXT];
    let (sql, arg_types): (&'static str, &[pgrx::PgOid]) = match read.named {
        None if scope.is_some() || holds_back_jobs(client) => {
            (include_str!("../../sql/queries/queue_passed_for_good.sql"), &EVERY)
        }
        Some(queue) if scope.is_some() => {
            arguments.push(queue.into());
            (include_str!("../../sql/queries/queue_passed_for_good_in_queue.sql"), &ONE_QUEUE)
        }
        // Nothing but a row lock makes such a claim pass over a live row.
        _ => return stepped_over.with_lasting(0),
    };
    let ordered = crate::plans::ordered_scans();
    let lasting = first_int8_in(client, sql, arg_types, &arguments, read.snapshot);
    drop(ordered);
    stepped_over.with_lasting(lasting.unwrap_or(stepped_over.passed))
}

/// Whether a queue is paused or limited (one cheap read that spares the
/// count in the usual case).
fn holds_back_jobs(client: &SpiClient<'_>) -> bool {
    let stmt = plan(client, include_str!("../../sql/queries/queue_holds_back_jobs.sql"), &[]);
    client.select(&*stmt, None, &[]).and_then(first_value::<bool>).or_raise().unwrap_or(true)
}
