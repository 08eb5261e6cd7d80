//! Which of the live rows a read from the head saw and passed over the next
//! read from the head passes over again: jobs of a paused or limited queue
//! for a claim of every queue, jobs outside a scoped caller's scope. The
//! others it passed over were locked by other transactions, and go once the
//! xmin horizon has passed the read (claim_start.rs).

use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::claim::Source;
use super::entries_read::SteppedOver;
use crate::errors::OrRaise;
use crate::plans::{first_value, plan, types};
use crate::scopes::Scope;

/// `stepped_over` with its passed rows split: those a later read passes
/// over again stay passed, the rest count as versions it could not see. The
/// read was along `source` at `now` for a caller of `scope`, and has just
/// run in this transaction. Counting reads the claim's index from the head
/// over as many live rows as the read passed over (and the dead entries
/// among them), only when something can make a claim pass over a live row
/// for good.
pub(crate) fn split_passed(
    client: &SpiClient<'_>,
    stepped_over: SteppedOver,
    source: &Source<'_>,
    scope: &Scope,
    now: TimestampWithTimeZone,
) -> SteppedOver {
    if stepped_over.passed == 0 {
        return stepped_over;
    }
    let scope = scope.as_parameter();
    let mut arguments = vec![stepped_over.passed.into(), now.into(), scope.clone().into()];
    let stmt = match source {
        Source::Every if scope.is_some() || holds_back_jobs(client) => {
            const TYPES: [pgrx::PgOid; 3] = [types::INT8, types::TIMESTAMPTZ, types::TEXT_ARRAY];
            plan(client, include_str!("../../sql/queries/queue_passed_for_good.sql"), &TYPES)
        }
        Source::Queue(queue, _) if scope.is_some() => {
            const TYPES: [pgrx::PgOid; 4] = [types::INT8, types::TIMESTAMPTZ, types::TEXT_ARRAY, types::TEXT];
            arguments.push((*queue).into());
            plan(client, include_str!("../../sql/queries/queue_passed_for_good_in_queue.sql"), &TYPES)
        }
        // Nothing but a row lock makes such a claim pass over a live row.
        _ => return stepped_over.with_lasting(0),
    };
    let ordered = crate::plans::ordered_scans();
    let lasting = client.select(&*stmt, None, &arguments).and_then(first_value::<i64>).or_raise();
    drop(ordered);
    stepped_over.with_lasting(lasting.unwrap_or(stepped_over.passed))
}

/// Whether a queue is paused or limited (one cheap read that spares the
/// count in the usual case).
fn holds_back_jobs(client: &SpiClient<'_>) -> bool {
    let stmt = plan(client, include_str!("../../sql/queries/queue_holds_back_jobs.sql"), &[]);
    client.select(&*stmt, None, &[]).and_then(first_value::<bool>).or_raise().unwrap_or(true)
}
