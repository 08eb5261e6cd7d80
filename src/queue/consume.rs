//! Handing jobs out: FOR UPDATE SKIP LOCKED, highest priority then oldest,
//! each with a lease. An expired lease makes its job claimable again, so a
//! crashed consumer's job never stays stuck, with no sweep needed.

use crate::text::Text;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::payload::Payload;
use super::resolve_worker;
use crate::errors::{int_in_range, positive_interval, OrRaise};
use crate::plans::{plan, types};

const MAX_BATCH: i32 = 1000;

/// One claimed job; the SQL signatures below spell the same columns out,
/// because pgrx reads them from the function's own tokens.
type Job = (i64, Text, Option<Payload>, i32, i32, TimestampWithTimeZone, i32, Text);

/// Returns up to `limit` expired leases to pending (or dead when out of attempts); how many.
pub fn reap_expired_leases(client: &SpiClient<'_>, limit: i64) -> usize {
    let stmt = plan(client, include_str!("../../sql/queries/queue_reap_expired.sql"), &[types::INT8]);
    client
        .select(&*stmt, None, &[limit.into()])
        .map(|rows| rows.len())
        .or_raise()
}

fn consume(p_batch: i32, p_worker_id: Option<Text>, p_lease: Option<Interval>) -> Vec<Job> {
    let lease = positive_interval(p_lease, "p_lease");
    crate::errors::require_primary("consume jobs");
    crate::access::connect(|client| {
        let worker = resolve_worker(client, p_worker_id);
        reap_expired_leases(client, p_batch as i64);
        let stmt = plan(
            client,
            include_str!("../../sql/queries/queue_consume.sql"),
            &[types::INT8, types::TEXT, types::INTERVAL, types::OID],
        );
        let role = crate::access::caller();
        client
            .select(&*stmt, None, &[(p_batch as i64).into(), (&worker).into(), lease.into(), role.into()])
            .and_then(|rows| {
                rows.map(|row| {
                    Ok((
                        row.get::<i64>(1)?.unwrap_or_default(),
                        row.get::<Text>(2)?.unwrap_or_default(),
                        row.get::<Payload>(3)?,
                        row.get::<i32>(4)?.unwrap_or_default(),
                        row.get::<i32>(5)?.unwrap_or_default(),
                        row.get::<TimestampWithTimeZone>(6)?
                            .unwrap_or_else(TimestampWithTimeZone::negative_infinity),
                        row.get::<i32>(7)?.unwrap_or_default(),
                        worker.clone(),
                    ))
                })
                .collect()
            })
            .or_raise()
    })
}

/// Claims the next runnable job (highest priority, then oldest) with a
/// lease; zero rows when there is none. A NULL worker id falls back to the
/// session's application_name or client address.
#[pg_extern]
fn consume_task(
    p_worker_id: default!(Option<Text>, "NULL"),
    p_lease: default!(Option<Interval>, "'5 minutes'"),
) -> TableIterator<
    'static,
    (
        name!(task_id, i64),
        name!(task_name, Text),
        name!(payload, Option<Payload>),
        name!(attempts, i32),
        name!(max_attempts, i32),
        name!(lease_expires_at, TimestampWithTimeZone),
        name!(priority, i32),
        name!(worker_id, Text),
    ),
> {
    TableIterator::new(consume(1, p_worker_id, p_lease))
}

/// Claims up to `p_batch` (1..1000) runnable jobs in one call.
#[pg_extern]
fn consume_tasks(
    p_batch: Option<i32>,
    p_worker_id: default!(Option<Text>, "NULL"),
    p_lease: default!(Option<Interval>, "'5 minutes'"),
) -> TableIterator<
    'static,
    (
        name!(task_id, i64),
        name!(task_name, Text),
        name!(payload, Option<Payload>),
        name!(attempts, i32),
        name!(max_attempts, i32),
        name!(lease_expires_at, TimestampWithTimeZone),
        name!(priority, i32),
        name!(worker_id, Text),
    ),
> {
    let batch = int_in_range(p_batch, "p_batch", 1..=MAX_BATCH);
    TableIterator::new(consume(batch, p_worker_id, p_lease))
}
