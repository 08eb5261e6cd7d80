//! Handing jobs out: FOR UPDATE SKIP LOCKED, highest priority then oldest,
//! each with a lease. A job whose lease ran out is taken over by the next
//! claim (or made dead when its attempts are used up), so a crashed
//! consumer's job never stays stuck, with no sweep needed. A consumer may
//! wait in the server for a job to become claimable (see wake.rs).

use crate::text::{Text, TextArray};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::claim::{claim_from, clock_now, timestamp, Claimant, Job, Source, Start};
use super::claim_start;
use super::limits::{claim_limited, limited_queues, Limited, Room};
use super::payload::Payload;
use super::resolve_worker;
use super::wake::{self, Due, Sleeper, WakeUp};
use crate::errors::{int_in_range, interval_micros, raise_with_hint, OrRaise};
use crate::plans::{first_two, plan, types};
use crate::scopes::{self, Capability, Scope};

pub(crate) const MAX_BATCH: i32 = 1000;

/// How soon a waiting consumer looks again when a limited queue had every
/// claim turn taken, at first and at most: a turn ends with its claim's
/// commit, soon in a busy queue, but a claim in an open transaction holds
/// it for as long as that stays open (looking every 2 ms then used a
/// tenth of a core per waiting consumer).
const BUSY_TURNS_FIRST_RETRY_MS: i64 = 2;
const BUSY_TURNS_LAST_RETRY_MS: i64 = 250;

/// How soon a waiting consumer looks again while the installed SQL is older
/// than 0.4.0: the update changes how wakers name queues.
const LEGACY_NAMES_RETRY_MS: i64 = 1000;

/// How soon a waiting consumer that found a limited queue full looks again
/// at first, and at most: no completion wakes it (waking those who wait for
/// room made them crowd the turns), and on a machine short of CPU each look
/// at a full queue slows the claims that hold its room.
const FULL_QUEUE_FIRST_RETRY_MS: i64 = wake::POLL_INTERVAL_MS;
const FULL_QUEUE_LAST_RETRY_MS: i64 = 1000;

thread_local! {
    static FULL_QUEUE_RETRY: std::cell::Cell<i64> = const { std::cell::Cell::new(FULL_QUEUE_FIRST_RETRY_MS) };
    static BUSY_TURNS_RETRY: std::cell::Cell<i64> = const { std::cell::Cell::new(BUSY_TURNS_FIRST_RETRY_MS) };
}

/// The wait before the next look at a full limited queue: it doubles from
/// look to look of this backend while its queues stay full.
fn next_full_queue_retry_ms() -> i64 {
    FULL_QUEUE_RETRY.with(|retry| retry.replace((retry.get() * 2).min(FULL_QUEUE_LAST_RETRY_MS)))
}

/// The same while a limited queue's claim turns stay taken.
fn next_busy_turns_retry_ms() -> i64 {
    BUSY_TURNS_RETRY.with(|retry| retry.replace((retry.get() * 2).min(BUSY_TURNS_LAST_RETRY_MS)))
}

/// A claim starts the waits at a full or busy queue over.
fn reset_limited_queue_retries() {
    FULL_QUEUE_RETRY.with(|retry| retry.set(FULL_QUEUE_FIRST_RETRY_MS));
    BUSY_TURNS_RETRY.with(|retry| retry.set(BUSY_TURNS_FIRST_RETRY_MS));
}

/// Where a consumer takes jobs from.
pub(crate) enum Route {
    /// 0.2.0's functions, on a database whose SQL may predate queues.
    Legacy,
    /// Every queue that is not paused.
    Every,
    /// These queues, tried in this order.
    Queues(Vec<Text>),
}

/// The route of `p_queues`: NULL for every queue (in the caller's consumer
/// scope); otherwise at least one name, none NULL or blank, each once, in
/// the order given, each in the caller's consumer scope (42501).
///
/// For a consumer that will wait (`p_wait` above zero), the scopes are read
/// in a subtransaction rolled back at once: the locks of those reads would
/// otherwise last through the wait (see consume_after).
pub(crate) fn route(p_queues: Option<TextArray>, p_wait: &Option<Interval>) -> Route {
    let Some(TextArray(given)) = p_queues else { return Route::Every };
    if p_wait.is_some_and(|wait| interval_micros(&wait) > 0) {
        return crate::subtransaction::run_keeping_if(|| named_route(given), |_| false);
    }
    named_route(given)
}

fn named_route(given: Vec<Option<Text>>) -> Route {
    if given.is_empty() {
        raise_with_hint(
            pgrx::PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            "p_queues must name at least one queue, got an empty array",
            "Pass NULL to take jobs from every queue.",
        );
    }
    let mut queues: Vec<Text> = Vec::with_capacity(given.len());
    for queue in given {
        let queue = crate::text::name(queue, "each element of p_queues");
        crate::scopes::require(crate::scopes::Capability::Consumer, "queue", &queue);
        if !queues.contains(&queue) {
            queues.push(queue);
        }
    }
    Route::Queues(queues)
}

/// What one look at the queue got: the jobs claimed, and whether a queue
/// with a concurrency limit was full or had every claim turn taken (a
/// waiting consumer then looks again soon, besides being woken).
struct Look {
    jobs: Vec<Job>,
    /// How many queues of a route of named queues it tried, in order.
    tried: usize,
    limited_queue_full: bool,
    /// A limited queue had every claim turn taken: they end within a commit.
    limited_queue_busy: bool,
    /// It changed what must commit without claiming: took back jobs whose
    /// lease ran out, or made such jobs dead (a waiting call that rolled
    /// that back would find them again at once, and never wait).
    changed: bool,
}

impl Look {
    fn note(&mut self, limited: Limited) {
        self.limited_queue_full |= limited.room == Room::Full;
        self.limited_queue_busy |= limited.room == Room::Busy;
        self.changed |= limited.changed;
    }
}

/// One look at the queue: claims up to `batch` jobs along `route`. Queues
/// with a concurrency limit are claimed from in their turn; a consumer of
/// every queue takes their jobs after the others'.
fn claim(client: &SpiClient<'_>, batch: i32, claimant: &Claimant<'_>, route: &Route) -> Look {
    let mut look =
        Look { jobs: Vec::new(), tried: 0, limited_queue_full: false, limited_queue_busy: false, changed: false };
    match route {
        Route::Legacy => {
            look.changed |= claim_from(client, batch, claimant, Source::Legacy, Start::Head, &mut look.jobs).made_dead;
        }
        Route::Every => {
            let end = claim_from(client, batch, claimant, Source::Every, Start::Remembered, &mut look.jobs);
            look.changed |= end.made_dead;
            if (look.jobs.len() as i32) < batch {
                // A scoped consumer of every queue takes no turn of a
                // queue outside its scope (the claim would find nothing).
                let limited = limited_queues(client, None);
                for (queue, max) in limited.into_iter().filter(|(queue, _)| claimant.scope.admits(queue.bytes())) {
                    let limited = claim_limited(client, batch, claimant, &queue, max, &mut look.jobs);
                    look.note(limited);
                    if look.jobs.len() as i32 >= batch {
                        break;
                    }
                }
            }
        }
        Route::Queues(queues) => {
            // The settings are read only when a queue gives too few: the
            // claim statement itself takes nothing from a limited queue, so
            // a claim that fills its batch costs one statement. Nor does it
            // look again from the head of a limited queue's index.
            let mut limited: Option<Vec<(Text, i32)>> = None;
            for queue in queues {
                look.tried += 1;
                let before = look.jobs.len();
                let end = claim_from(
                    client,
                    batch,
                    claimant,
                    Source::Queue(queue, false),
                    Start::RememberedOnly,
                    &mut look.jobs,
                );
                look.changed |= end.made_dead;
                let short = end.short;
                if short || look.jobs.len() == before {
                    let limited = limited.get_or_insert_with(|| limited_queues(client, Some(queues)));
                    match limited.iter().find(|(name, _)| name == queue) {
                        Some((_, max)) => {
                            let limited = claim_limited(client, batch, claimant, queue, *max, &mut look.jobs);
                            look.note(limited);
                        }
                        None if short => {
                            let source = Source::Queue(queue, false);
                            look.changed |= claim_from(client, batch, claimant, source, Start::Head, &mut look.jobs).made_dead;
                        }
                        None => {}
                    }
                }
                if look.jobs.len() as i32 >= batch {
                    break;
                }
            }
        }
    }
    if let Some(expiry) = look.jobs.iter().map(|job| job.5.into_inner()).min() {
        let queue = match route {
            Route::Queues(queues) if queues.len() == 1 => Some(queues[0].bytes()),
            _ => None,
        };
        // (What an abort gives back is logged per claim statement: claim.rs.)
        wake::jobs_claimed(queue, expiry);
    }
    look
}

/// How far ahead a waiting look reads when the next job comes due; one that
/// learns of nothing due by then looks again then. Reading further cost
/// every empty look dearly while a snapshot was held: the processing
/// versions of the jobs completed since keep their leases (claim time plus
/// lease) at the low end of the lease index, and finding the first live
/// lease stepped over all of them (1 s a look after 100 s of a hold at
/// 13,000 jobs/s, which made the looks that found nothing for a moment the
/// slowest of all). Up to the horizon lie only the dead versions of jobs
/// claimed a lease's length before it: none, for 5-minute leases, unless a
/// hold lasts longer than 4 minutes.
pub(crate) const NEXT_DUE_HORIZON_US: i64 = 60_000_000;

/// When the next job becomes claimable with time alone (a lease running out
/// or a run_after coming) within NEXT_DUE_HORIZON_US of `now`, and its
/// queue: also after this call's deadline, so that a consumer leaving
/// before a job it was woken for comes due passes the due time on to one
/// that waits on (wake::leave).
fn next_due(client: &SpiClient<'_>, now: pg_sys::TimestampTz, scope: &Scope, route: &Route) -> Option<Due> {
    let horizon = timestamp(now.saturating_add(NEXT_DUE_HORIZON_US));
    let mut arguments = vec![timestamp(now).into(), horizon.into(), scope.as_parameter().into()];
    let stmt = match route {
        Route::Legacy => plan(
            client,
            include_str!("../../sql/queries/queue_next_due_0_2_0.sql"),
            &[types::TIMESTAMPTZ, types::TIMESTAMPTZ, types::TEXT_ARRAY],
        ),
        Route::Every | Route::Queues(_) => {
            let queues = match route {
                Route::Queues(queues) => Some(queues.clone()),
                _ => None,
            };
            arguments.push(queues.into());
            arguments.push(unsafe { pg_sys::MyDatabaseId }.into());
            plan(
                client,
                include_str!("../../sql/queries/queue_next_due.sql"),
                &[types::TIMESTAMPTZ, types::TIMESTAMPTZ, types::TEXT_ARRAY, types::TEXT_ARRAY, types::OID],
            )
        }
    };
    // 0.2.0's statement gives no queue: any.
    client
        .select(&*stmt, None, &arguments)
        .and_then(first_two::<TimestampWithTimeZone, Text>)
        .or_raise()
        .and_then(|(due, queue)| {
            Some(Due { at: due?.into_inner(), queue: queue.map_or(0, |queue| wake::queue_hash(queue.bytes())) })
        })
}

/// A wait of `p_wait` in microseconds; NULL or zero means none.
fn wait_micros(p_wait: Option<Interval>) -> i64 {
    let Some(wait) = p_wait else { return 0 };
    let micros = interval_micros(&wait);
    if micros < 0 {
        raise_with_hint(
            pgrx::PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("p_wait must not be negative, got {wait}"),
            "Pass NULL or '0' not to wait.",
        );
    }
    micros.min(i64::MAX as i128 / 2) as i64
}

/// Whether the transaction has been given a transaction id.
fn has_transaction_id() -> bool {
    unsafe { pg_sys::GetTopTransactionIdIfAny() != pg_sys::InvalidTransactionId }
}

/// Each look needs a snapshot that includes what committed since the last
/// one, which only READ COMMITTED gives.
fn require_read_committed() {
    crate::errors::require_read_committed(
        "consume_task cannot wait (p_wait) in a REPEATABLE READ or SERIALIZABLE transaction",
        "Its snapshot would never show new jobs: wait in a READ COMMITTED transaction, or pass p_wait => NULL.",
    );
}

pub(crate) fn consume(
    p_batch: i32,
    p_worker_id: Option<Text>,
    p_lease: Option<Interval>,
    p_wait: Option<Interval>,
    route: Route,
) -> Vec<Job> {
    consume_after(p_batch, p_worker_id, p_lease, p_wait, route, |_, _| false)
}

/// [`consume`], running `before` first, in the first look's connection and
/// transaction, with the worker id. When `before` returns true (it changed
/// something that must commit, such as settled jobs) and the first look
/// finds no job, returns at once rather than wait with those changes
/// uncommitted.
pub(crate) fn consume_after(
    p_batch: i32,
    p_worker_id: Option<Text>,
    p_lease: Option<Interval>,
    p_wait: Option<Interval>,
    route: Route,
    mut before: impl FnMut(&SpiClient<'_>, &Text) -> bool,
) -> Vec<Job> {
    let lease = super::job_lease(p_lease);
    let wait = wait_micros(p_wait);
    crate::errors::require_primary("consume jobs");
    let mut deadline = clock_now().saturating_add(wait);
    let had_transaction_id = has_transaction_id();
    // Resolved in the first look's connection: a second SPI connection and
    // rights switch per claim would cost the hot path.
    let mut given_worker = Some(p_worker_id);
    let mut worker: Option<Text> = None;
    let mut sleeper: Option<Sleeper> = None;
    let mut woken: Option<WakeUp> = None;
    let mut slept = false;
    loop {
        let in_subtransaction = sleeper.is_some() || deadline > clock_now();
        let mut look_once = || {
            crate::access::connect(|client| {
                let mut settled = false;
                let worker = worker.get_or_insert_with(|| {
                    let resolved = resolve_worker(client, given_worker.take().flatten());
                    if before(client, &resolved) {
                        deadline = deadline.min(clock_now());
                        settled = true;
                    }
                    resolved
                });
                let scope = scopes::of_caller(Capability::Consumer);
                // Registered before the first look of a call that may wait, so
                // that a look that finds nothing sleeps at once and no commit
                // between the look and the sleep goes unnoticed (registering
                // after an empty look took a second look before every sleep).
                if sleeper.is_none() && deadline > clock_now() {
                    let queues = match &route {
                        Route::Queues(queues) => Some(&queues[..]),
                        Route::Every | Route::Legacy => None,
                    };
                    sleeper = Some(Sleeper::new(queues, matches!(*scope, Scope::Prefixes(_)), p_batch));
                }
                let prepared = sleeper.is_some() && super::prepared::prepared_transactions_here(client);
                let claimant = Claimant { worker, lease, scope: &scope };
                claim_start::frontier_was_used();
                let mut look = claim(client, p_batch, &claimant, &route);
                // Before sleeping, once more from its own places: jobs let go
                // with no log entry may lie behind the shared frontier
                // (claim_start::without_frontier). If that finds nothing
                // either, it sleeps at most a second (below).
                let mut from_frontier = false;
                if look.jobs.is_empty() && sleeper.is_some() && claim_start::frontier_was_used() {
                    from_frontier = true;
                    let again = claim_start::without_frontier(|| claim(client, p_batch, &claimant, &route));
                    look = Look {
                        jobs: again.jobs,
                        tried: look.tried.max(again.tried),
                        limited_queue_full: look.limited_queue_full | again.limited_queue_full,
                        limited_queue_busy: look.limited_queue_busy | again.limited_queue_busy,
                        changed: look.changed | again.changed,
                    };
                }
                look.changed |= settled;
                // When to look again if nothing comes due before: the
                // horizon of the read that found nothing due.
                let (due, horizon) = if look.jobs.is_empty() && sleeper.is_some() {
                    let read_at = clock_now();
                    let due = next_due(client, read_at, &scope, &route);
                    let due = if prepared || from_frontier {
                        let in_a_second = Due { at: clock_now() + 1_000_000, queue: 0 };
                        Some(due.filter(|due| due.at <= in_a_second.at).unwrap_or(in_a_second))
                    } else {
                        due
                    };
                    (due, read_at.saturating_add(NEXT_DUE_HORIZON_US))
                } else {
                    (None, pg_sys::TimestampTz::MAX)
                };
                (look, due, horizon)
            })
        };
        // A call that may sleep looks in a subtransaction, rolled back when
        // the look leaves nothing to keep: the locks its statements took (on
        // the queue's tables and indexes, and on rows a claim locked but did
        // not take) go before it sleeps, so that no DDL, TRUNCATE or settle
        // waits for a sleeping consumer, nor every enqueue behind that DDL.
        let (look, due, horizon) = if in_subtransaction {
            crate::subtransaction::run_keeping_if(look_once, |(look, _, _)| !look.jobs.is_empty() || look.changed)
        } else {
            look_once()
        };
        let now = clock_now();
        // A client that died while this call slept, just before or during
        // the look that claimed, must not get jobs it will never settle:
        // ending the backend rolls the claims back, which wakes others.
        if !look.jobs.is_empty() && slept && crate::client_connection::client_gone() {
            crate::client_connection::leave_as_client_lost();
        }
        if !look.jobs.is_empty() {
            reset_limited_queue_retries();
            if let (Some(sleeper), Some(woken), Route::Queues(queues)) = (&sleeper, woken, &route) {
                sleeper.answered_without(woken, &queues[look.tried.min(queues.len())..]);
            }
        } else if let Some(sleeper) = &sleeper {
            sleeper.learned(due);
        }
        // A look that changed what must commit (made jobs dead, took them
        // back) without claiming returns for its caller to commit: its
        // changes are invisible and its locks held until then.
        if !look.jobs.is_empty() || look.changed || now >= deadline {
            return look.jobs;
        }
        // Never sleep with a transaction id this call was given: it would
        // hold back every other snapshot's xmin, and so the removal of every
        // row version that dies meanwhile. A look that found nothing can
        // have one: a job claimed by another consumer after the look's
        // snapshot is locked before the recheck turns it down, and rolling
        // the look's subtransaction back keeps the id. The caller calls
        // again.
        if !had_transaction_id && has_transaction_id() {
            return look.jobs;
        }
        // Neither a completion that makes room in a full limited queue nor
        // the end of a claim's turn wakes anyone (waking those who wait for
        // room made them crowd the turns): look again soon.
        let soon = match (look.limited_queue_busy, look.limited_queue_full) {
            (true, _) => Some(next_busy_turns_retry_ms()),
            (false, true) => Some(next_full_queue_retry_ms()),
            (false, false) => None,
        };
        // Until the update to 0.4.0, wakers may switch how they name queues
        // while this consumer sleeps (wake::queues_named_as_0_3_0); one that
        // registered before the switch is never woken by name after it.
        let named_as_0_3_0 = sleeper.as_ref().is_some_and(Sleeper::named_as_0_3_0);
        let soon = match soon {
            None if named_as_0_3_0 || super::wake::queues_named_as_0_3_0() => Some(LEGACY_NAMES_RETRY_MS),
            soon => soon,
        };
        let due = due.map(|due| due.at);
        let due = match soon {
            Some(ms) => Some(due.unwrap_or(deadline).min(now + ms * 1000)),
            None => due,
        };
        if let Some(sleeper) = &sleeper {
            require_read_committed();
            // Nothing due within the horizon of next_due: look again there.
            let until = due.unwrap_or(horizon).min(deadline);
            woken = sleeper.sleep((until - now + 999) / 1000);
            slept = true;
        }
    }
}

/// Claims the next runnable job (highest priority, then oldest) of the
/// queues `p_queues` (tried in the order given; NULL: every queue) with a
/// lease; zero rows when there is none, after waiting up to `p_wait` for
/// one. A NULL worker id falls back to the session's application_name or
/// client address. The last columns are the job's queue and group (0.4.0;
/// 0.3.0's entry point, without them, is in src/compat/v0_3_0.rs).
#[pg_extern(name = "consume_task")]
fn consume_task_with_queue(
    p_worker_id: default!(Option<Text>, "NULL"),
    p_lease: default!(Option<Interval>, "'5 minutes'"),
    p_wait: default!(Option<Interval>, "NULL"),
    p_queues: default!(Option<TextArray>, "NULL"),
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
        name!(queue, Option<Text>),
        name!(group_key, Option<Text>),
    ),
> {
    let route = route(p_queues, &p_wait);
    TableIterator::new(consume(1, p_worker_id, p_lease, p_wait, route))
}

/// Claims up to `p_batch` (1..1000) runnable jobs of the queues `p_queues`
/// in one call, after waiting up to `p_wait` for the first; the last columns
/// are each job's queue and group.
#[pg_extern(name = "consume_tasks")]
fn consume_tasks_with_queue(
    p_batch: Option<i32>,
    p_worker_id: default!(Option<Text>, "NULL"),
    p_lease: default!(Option<Interval>, "'5 minutes'"),
    p_wait: default!(Option<Interval>, "NULL"),
    p_queues: default!(Option<TextArray>, "NULL"),
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
        name!(queue, Option<Text>),
        name!(group_key, Option<Text>),
    ),
> {
    let batch = int_in_range(p_batch, "p_batch", 1..=MAX_BATCH);
    let route = route(p_queues, &p_wait);
    TableIterator::new(consume(batch, p_worker_id, p_lease, p_wait, route))
}
