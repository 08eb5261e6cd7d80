//! One claim statement: FOR UPDATE SKIP LOCKED over the runnable jobs (and
//! expired leases) of every queue or of one, each claimed job given a lease.

use crate::text::Text;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::payload::Payload;
use crate::errors::OrRaise;
use crate::plans::{plan, types};
use crate::scopes::Scope;

/// One claimed job; the SQL signatures below spell the same columns out,
/// because pgrx reads them from the function's own tokens.
pub(crate) type Job = (i64, Text, Option<Payload>, i32, i32, TimestampWithTimeZone, i32, Text);

pub(crate) fn clock_now() -> pg_sys::TimestampTz {
    unsafe { pg_sys::GetCurrentTimestamp() }
}

pub(crate) fn timestamp(us: pg_sys::TimestampTz) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(us).unwrap_or_else(|_| TimestampWithTimeZone::positive_infinity())
}

/// What one claim statement reads.
pub(crate) enum Source<'a> {
    Legacy,
    Every,
    /// One queue; with true, also when it has a concurrency limit (the
    /// caller holds its claim turn and asks for no more than the room).
    Queue(&'a Text, bool),
}

/// Claims into `jobs` until it holds `batch`, from `source`. Rows the
/// statement made dead (an expired lease with no attempt left) are not
/// handed out; while any were, it looks again for the jobs they displaced.
pub(crate) fn claim_from(
    client: &SpiClient<'_>,
    batch: i32,
    worker: &Text,
    lease: Interval,
    scope: &Scope,
    source: Source<'_>,
    jobs: &mut Vec<Job>,
) {
    const EVERY: [pgrx::PgOid; 6] =
        [types::INT8, types::TEXT, types::INTERVAL, types::OID, types::TIMESTAMPTZ, types::TEXT_ARRAY];
    const ONE_QUEUE: [pgrx::PgOid; 8] = [
        types::INT8, types::TEXT, types::INTERVAL, types::OID, types::TIMESTAMPTZ, types::TEXT_ARRAY, types::TEXT, types::BOOL,
    ];
    let (stmt, queue) = match source {
        Source::Legacy => (plan(client, include_str!("../../sql/queries/queue_consume_0_2_0.sql"), &EVERY), None),
        Source::Every => (plan(client, include_str!("../../sql/queries/queue_consume.sql"), &EVERY), None),
        Source::Queue(queue, limited) => {
            (plan(client, include_str!("../../sql/queries/queue_consume_queue.sql"), &ONE_QUEUE), Some((queue, limited)))
        }
    };
    let role = crate::access::caller();
    loop {
        let wanted = batch as i64 - jobs.len() as i64;
        if wanted <= 0 {
            break;
        }
        let now = timestamp(clock_now());
        let mut made_dead = 0;
        let mut arguments =
            vec![wanted.into(), worker.into(), lease.into(), role.into(), now.into(), scope.as_parameter().into()];
        if let Some((queue, limited)) = queue {
            arguments.push(queue.into());
            arguments.push(limited.into());
        }
        client
            .select(&*stmt, None, &arguments)
            .and_then(|rows| {
                for row in rows {
                    if row.get::<bool>(8)? != Some(true) {
                        made_dead += 1;
                        continue;
                    }
                    jobs.push((
                        row.get::<i64>(1)?.unwrap_or_default(),
                        row.get::<Text>(2)?.unwrap_or_default(),
                        row.get::<Payload>(3)?,
                        row.get::<i32>(4)?.unwrap_or_default(),
                        row.get::<i32>(5)?.unwrap_or_default(),
                        row.get::<TimestampWithTimeZone>(6)?
                            .unwrap_or_else(TimestampWithTimeZone::negative_infinity),
                        row.get::<i32>(7)?.unwrap_or_default(),
                        worker.clone(),
                    ));
                }
                Ok(())
            })
            .or_raise();
        if made_dead == 0 {
            break;
        }
    }
}

