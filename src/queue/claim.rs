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

/// Who claims: the worker, its lease, the scope it may take jobs from, and
/// whether a sleep may follow its claims in the same transaction.
pub(crate) struct Claimant<'a> {
    pub worker: &'a Text,
    pub lease: Interval,
    pub scope: &'a Scope,
    pub may_sleep: bool,
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
///
/// A claim statement can lock a row it does not return: a job claimed and
/// committed by another consumer after the statement's snapshot is locked
/// in its latest version before the recheck finds it no longer runnable,
/// and that lock lasts until the transaction ends. Held through a sleep, it
/// made the job's holder wait to settle it until the sleeper woke. So when
/// a sleep may follow, each statement runs in a subtransaction, rolled back
/// when it returns no row, which drops those locks.
pub(crate) fn claim_from(
    client: &SpiClient<'_>,
    batch: i32,
    claimant: &Claimant<'_>,
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
        let Claimant { worker, lease, scope, .. } = *claimant;
        let mut arguments =
            vec![wanted.into(), worker.into(), lease.into(), role.into(), now.into(), scope.as_parameter().into()];
        if let Some((queue, limited)) = queue {
            arguments.push(queue.into());
            arguments.push(limited.into());
        }
        let before = jobs.len();
        let mut run_statement = || {
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
            made_dead + (jobs.len() - before)
        };
        if claimant.may_sleep {
            crate::subtransaction::run_keeping_if(run_statement, |returned| *returned > 0);
        } else {
            run_statement();
        }
        if made_dead == 0 {
            break;
        }
    }
}

