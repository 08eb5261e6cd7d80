//! Taking back jobs whose consumer's lease ran out, outside a claim: by the
//! sweep for every queue, and by a claim of a queue with a concurrency
//! limit, whose room such jobs would hold until then (the takeover inside
//! the claim statement comes only with room).

use pgrx::spi::SpiClient;

use super::claim::{clock_now, timestamp};
use super::place::Place;
use super::wake;
use crate::errors::OrRaise;
use crate::shared::queue_counters::Outcome;
use crate::plans::{plan, types};
use crate::text::Text;

/// Returns up to `limit` expired leases (of `queue`, or any) to pending, or
/// to dead when out of attempts; how many. Waiting consumers are woken for
/// those runnable again at commit.
pub fn reap_expired_leases_of(client: &SpiClient<'_>, limit: i64, queue: Option<&Text>) -> usize {
    let stmt = plan(
        client,
        super::for_attempts(
            include_str!("../../sql/queries/queue_reap_expired.sql"),
            include_str!("../../sql/queries/queue_reap_expired_0_3_0.sql"),
        ),
        &[types::INT8, types::TIMESTAMPTZ, types::TEXT],
    );
    let (reaped, runnable) = client
        .select(&*stmt, None, &[limit.into(), timestamp(clock_now()).into(), queue.into()])
        .and_then(|rows| {
            let mut counts = (0, 0);
            for row in rows {
                let put_back = row.get::<bool>(1)? == Some(true);
                counts.0 += 1;
                counts.1 += usize::from(put_back);
                let queue = row.get::<Text>(2)?.unwrap_or_default();
                let outcome = if put_back { Outcome::Expired } else { Outcome::Dead };
                super::counters::note(queue.bytes(), outcome, None);
            }
            Ok(counts)
        })
        .or_raise();
    wake::jobs_added(queue.map(Text::bytes), runnable, Place::HEAD);
    reaped
}

/// The sweep's: every queue.
pub fn reap_expired_leases(client: &SpiClient<'_>, limit: i64) -> usize {
    reap_expired_leases_of(client, limit, None)
}
