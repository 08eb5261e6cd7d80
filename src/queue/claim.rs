//! One claim statement: FOR UPDATE SKIP LOCKED over the runnable jobs (and
//! expired leases) of every queue or of one, each claimed job given a lease.

use crate::text::Text;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::claim_start::{self, Origin};
use super::place::Place;
use super::payload::Payload;
use crate::errors::OrRaise;
use crate::plans::{plan, types};
use crate::scopes::Scope;

/// One claimed job; the SQL signatures below spell the same columns out,
/// because pgrx reads them from the function's own tokens. The last two are
/// the job's queue (NULL from 0.2.0's tables, which have none) and its group
/// (NULL from tables before 0.4.0's).
pub(crate) type Job =
    (i64, Text, Option<Payload>, i32, i32, TimestampWithTimeZone, i32, Text, Option<Text>, Option<Text>);

/// A claimed job as the functions of 0.1.0 to 0.3.0 return it: without its
/// queue (src/compat keeps their entry points).
pub(crate) type JobWithoutQueue = (i64, Text, Option<Payload>, i32, i32, TimestampWithTimeZone, i32, Text);

pub(crate) fn without_queue(jobs: Vec<Job>) -> Vec<JobWithoutQueue> {
    jobs.into_iter()
        .map(|(id, name, payload, attempts, max_attempts, lease, priority, worker, _, _)| {
            (id, name, payload, attempts, max_attempts, lease, priority, worker)
        })
        .collect()
}

pub(crate) fn clock_now() -> pg_sys::TimestampTz {
    unsafe { pg_sys::GetCurrentTimestamp() }
}

pub(crate) fn timestamp(us: pg_sys::TimestampTz) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(us).unwrap_or_else(|_| TimestampWithTimeZone::positive_infinity())
}

/// Who claims: the worker, its lease, the scope it may take jobs from.
pub(crate) struct Claimant<'a> {
    pub worker: &'a Text,
    pub lease: Interval,
    pub scope: &'a Scope,
}

/// What one claim statement reads.
pub(crate) enum Source<'a> {
    Legacy,
    Every,
    /// One queue; with true, also when it has a concurrency limit (the
    /// caller holds its claim turn and asks for no more than the room).
    Queue(&'a Text, bool),
}

/// Where a claim starts reading its index (see claim_start.rs).
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Start {
    /// Where this backend's last claim of the source left off; from the
    /// head again when that finds fewer jobs than wanted.
    Remembered,
    /// The same, but the caller looks again from the head (or knows that
    /// the source hands out nothing anyway).
    RememberedOnly,
    Head,
}

/// What a claim left to know besides the jobs it claimed.
#[derive(Clone, Copy, Default)]
pub(crate) struct ClaimEnd {
    /// It started after the head and found fewer jobs than wanted with jobs
    /// possibly left before its start (with `Start::RememberedOnly`: the
    /// head may hold more).
    pub short: bool,
    /// It made jobs dead (expired leases with no attempt left): a change to
    /// commit, whether or not it claimed any.
    pub made_dead: bool,
}

/// Claims into `jobs` until it holds `batch`, from `source`, starting at
/// `start`. Rows the statement made dead (an expired lease with no attempt
/// left) are not handed out; while any were, it looks again for the jobs
/// they displaced.
///
/// A claim statement can lock a row it does not return: a job claimed and
/// committed by another consumer after the statement's snapshot is locked
/// in its latest version before the recheck finds it no longer runnable,
/// and that lock lasts until the transaction ends. A consumer that may
/// sleep after it looks in a subtransaction rolled back when the look finds
/// nothing (consume.rs), which drops those locks with the others.
pub(crate) fn claim_from(
    client: &SpiClient<'_>,
    batch: i32,
    claimant: &Claimant<'_>,
    source: Source<'_>,
    start: Start,
    jobs: &mut Vec<Job>,
) -> ClaimEnd {
    const LEGACY: [pgrx::PgOid; 6] =
        [types::INT8, types::TEXT, types::INTERVAL, types::OID, types::TIMESTAMPTZ, types::TEXT_ARRAY];
    const EVERY: [pgrx::PgOid; 9] = [
        types::INT8, types::TEXT, types::INTERVAL, types::OID, types::TIMESTAMPTZ, types::TEXT_ARRAY, types::INT4,
        types::TIMESTAMPTZ, types::INT8,
    ];
    const ONE_QUEUE: [pgrx::PgOid; 11] = [
        types::INT8, types::TEXT, types::INTERVAL, types::OID, types::TIMESTAMPTZ, types::TEXT_ARRAY, types::TEXT, types::BOOL,
        types::INT4, types::TIMESTAMPTZ, types::INT8,
    ];
    // Only 0.4.0's statements (tables with job_attempts) return the job's
    // group (column 13).
    let returns_group = !matches!(source, Source::Legacy) && super::attempts_recorded();
    let (stmt, queue) = match source {
        Source::Legacy => (plan(client, include_str!("../../sql/queries/queue_consume_0_2_0.sql"), &LEGACY), None),
        Source::Every => {
            let sql = if returns_group {
                include_str!("../../sql/queries/queue_consume.sql")
            } else {
                include_str!("../../sql/queries/queue_consume_0_3_0.sql")
            };
            (plan(client, sql, &EVERY), None)
        }
        Source::Queue(queue, limited) => {
            let sql = if returns_group {
                include_str!("../../sql/queries/queue_consume_queue.sql")
            } else {
                include_str!("../../sql/queries/queue_consume_queue_0_3_0.sql")
            };
            (plan(client, sql, &ONE_QUEUE), Some((queue, limited)))
        }
    };
    let starts_anywhere = !matches!(source, Source::Legacy);
    let start_queue = queue.map(|(queue, _)| queue);
    let mut from_head = !starts_anywhere || start == Start::Head;
    let role = crate::access::caller();
    let mut end = ClaimEnd::default();
    loop {
        let wanted = batch as i64 - jobs.len() as i64;
        if wanted <= 0 {
            break;
        }
        let now_us = clock_now();
        let now = timestamp(now_us);
        let mut made_dead = 0;
        let Claimant { worker, lease, scope } = *claimant;
        let mut arguments =
            vec![wanted.into(), worker.into(), lease.into(), role.into(), now.into(), scope.as_parameter().into()];
        if let Some((queue, limited)) = queue {
            arguments.push(queue.into());
            arguments.push(limited.into());
        }
        // Read before the statement's snapshot is taken.
        let position = claim_start::log_position();
        let unscoped = scope.as_parameter().is_none();
        // Likewise: whether its end may become the others' start.
        let frontier_epoch = if unscoped {
            crate::shared::claim_frontier::frontier().and_then(|frontier| {
                let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
                frontier.learn_prepared(database, super::prepared::prepared_transactions_allowed(), || {
                    super::prepared::prepared_xids(client)
                });
                frontier.publishable_epoch(database)
            })
        } else {
            None
        };
        let from =
            if from_head { Origin::HEAD } else { claim_start::start(start_queue, role, now_us, position, unscoped) };
        // Only for a read from the head, what it steps over (claim_start.rs).
        let head_read_from = (starts_anywhere && from.place == Place::HEAD).then(|| {
            // Before the statement: every version it cannot see was made
            // (or made dead) by a transaction before this one.
            let next_xid = unsafe { pg_sys::ReadNextTransactionId() };
            (next_xid, super::entries_read::runnable_entries_read())
        });
        if starts_anywhere {
            let place = from.place;
            let run_after = if place.run_after == Place::HEAD.run_after {
                TimestampWithTimeZone::negative_infinity()
            } else {
                timestamp(place.run_after)
            };
            arguments.extend([place.priority.into(), run_after.into(), place.id.into()]);
        }
        let mut furthest: Option<Place> = None;
        let before = jobs.len();
        let mut run_statement = || {
            let ordered = starts_anywhere.then(crate::plans::ordered_scans);
            let rows = client.select(&*stmt, None, &arguments);
            drop(ordered);
            rows
                .and_then(|rows| {
                    for row in rows {
                        let claimed = row.get::<bool>(8)? == Some(true);
                        if starts_anywhere {
                            count_claim(&row, claimed, now_us)?;
                        }
                        if !claimed {
                            made_dead += 1;
                            continue;
                        }
                        // A job taken over from an expired lease comes first
                        // whatever its place, so it does not move the start.
                        if starts_anywhere && row.get::<bool>(10)? != Some(true) {
                            let place = Place {
                                priority: row.get::<i32>(7)?.unwrap_or_default(),
                                run_after: row.get::<TimestampWithTimeZone>(9)?.map_or(0, |t| t.into_inner()),
                                id: row.get::<i64>(1)?.unwrap_or_default(),
                            };
                            furthest = Some(furthest.map_or(place, |f| f.max(place)));
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
                            if starts_anywhere { row.get::<Text>(11)? } else { None },
                            if returns_group { row.get::<Text>(13)? } else { None },
                        ));
                    }
                    Ok(())
                })
                .or_raise();
            made_dead + (jobs.len() - before)
        };
        // What the statement sees of other transactions, as near as SPI
        // lets us (passed_for_good.rs counts in it what a read from the head
        // passed over): taken right before it, only when there may be a
        // count, and after the locks it takes first (a claim queued behind
        // DDL would otherwise wait between the two snapshots).
        let snapshot = (head_read_from.is_some() && position.is_some()).then(|| {
            lock_claim_tables();
            crate::plans::in_snapshot::HeldSnapshot::now()
        });
        let given_back = super::wake::claim_may_give_back(start_queue.map(Text::bytes));
        let returned = run_statement();
        end.made_dead |= made_dead > 0;
        if jobs.len() > before {
            // Were these claims rolled back, their jobs would be runnable
            // again from the start of the highest priority among them.
            let highest = jobs[before..].iter().map(|job| job.6).max().unwrap_or(i32::MAX);
            given_back.claimed(jobs.len() - before, Place { priority: highest, ..Place::HEAD });
        } else {
            given_back.nothing();
        }
        if starts_anywhere {
            let head_read = head_read_from.map_or_else(claim_start::HeadRead::default, |(next_xid, before)| {
                let stepped_over = super::entries_read::runnable_entries_read().stepped_over_since(before, returned as i64);
                // What it met matters only when the next claims start after
                // it (it claimed a job) and reads from the head are spaced
                // by it (the runnable log vouches: claim_start::head_every).
                let stepped_over = if let (Some(_), Some(snapshot)) = (furthest, &snapshot) {
                    // It read the runnable index up to its last job when it
                    // returned all it wanted (jobs taken over from expired
                    // leases come from the lease index, and the sweep puts
                    // jobs back with another message: queue_reap_expired.sql).
                    let end = furthest.filter(|_| returned as i64 >= wanted);
                    let read = super::passed_for_good::HeadReadDone { named: start_queue, scope: claimant.scope, now, end, snapshot };
                    super::passed_for_good::split_passed(client, stepped_over, read)
                } else {
                    stepped_over
                };
                claim_start::HeadRead { stepped_over, next_xid }
            });
            claim_start::claimed(start_queue, role, from, furthest, now_us, position, head_read, frontier_epoch);
        }
        if !from.complete && (returned as i64) < wanted {
            // The index may hold runnable jobs before where this claim started.
            if start == Start::RememberedOnly {
                end.short = true;
                return end;
            }
            from_head = true;
            continue;
        }
        if made_dead == 0 {
            break;
        }
    }
    end
}

/// Notes a row a claim statement returned for the queue counters: a claim
/// (of a runnable job, with how long it waited since it became runnable;
/// or taken over from an expired lease), or a job its takeover made dead.
fn count_claim(row: &pgrx::spi::SpiHeapTupleData<'_>, claimed: bool, now_us: pg_sys::TimestampTz) -> pgrx::spi::SpiResult<()> {
    use crate::shared::queue_counters::Outcome;
    let queue = row.get::<Text>(11)?.unwrap_or_default();
    if !claimed {
        super::counters::note(queue.bytes(), Outcome::Dead, None);
    } else if row.get::<bool>(10)? == Some(true) {
        super::counters::note(queue.bytes(), Outcome::Claimed, None);
        super::counters::note(queue.bytes(), Outcome::TakenOver, None);
    } else {
        let run_after = row.get::<TimestampWithTimeZone>(9)?.map_or(now_us, |t| t.into_inner());
        let created_at = row.get::<TimestampWithTimeZone>(12)?.map_or(now_us, |t| t.into_inner());
        super::counters::note(queue.bytes(), Outcome::Claimed, Some(now_us - run_after.max(created_at)));
    }
    Ok(())
}

/// Takes the table locks a claim statement takes before its snapshot, in
/// the modes it takes them (a weaker one first would be a lock upgrade,
/// which can deadlock with DDL): the queue's table for its writes, the
/// queue settings for its reads, the attempt history for a takeover's
/// record (0.4.0; every claim statement writes it, whether or not it takes
/// a lease over). The statement's own requests then find them held. A
/// table gone meanwhile, or not there yet, is left to the statement.
fn lock_claim_tables() {
    for (table, mode) in [
        (c"task_queue", pg_sys::RowExclusiveLock),
        (c"queue_settings", pg_sys::AccessShareLock),
        (c"job_attempts", pg_sys::RowExclusiveLock),
    ] {
        let oid = crate::version::table_oid(table);
        if oid != pg_sys::InvalidOid {
            unsafe { pg_sys::LockRelationOid(oid, mode as pg_sys::LOCKMODE) };
        }
    }
}
