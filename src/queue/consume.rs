//! Handing jobs out: FOR UPDATE SKIP LOCKED, highest priority then oldest,
//! each with a lease. A job whose lease ran out is taken over by the next
//! claim (or made dead when its attempts are used up), so a crashed
//! consumer's job never stays stuck, with no sweep needed. A consumer may
//! wait in the server for a job to become claimable (see wake.rs).

use crate::text::{Text, TextArray};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::payload::Payload;
use super::resolve_worker;
use super::wake::{self, Sleeper};
use crate::errors::{int_in_range, interval_micros, positive_interval, raise_with_hint, OrRaise};
use crate::plans::{first_value, plan, types};
use crate::scopes::{self, Capability, Scope};

pub(crate) const MAX_BATCH: i32 = 1000;

/// How soon a waiting consumer looks again when a limited queue had every
/// claim turn taken: a turn ends with its claim's commit.
const BUSY_TURNS_RETRY_MS: i64 = 2;

/// One claimed job; the SQL signatures below spell the same columns out,
/// because pgrx reads them from the function's own tokens.
type Job = (i64, Text, Option<Payload>, i32, i32, TimestampWithTimeZone, i32, Text);

fn clock_now() -> pg_sys::TimestampTz {
    unsafe { pg_sys::GetCurrentTimestamp() }
}

fn timestamp(us: pg_sys::TimestampTz) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(us).unwrap_or_else(|_| TimestampWithTimeZone::positive_infinity())
}

/// Returns up to `limit` expired leases to pending (or dead when out of attempts); how many.
pub fn reap_expired_leases(client: &SpiClient<'_>, limit: i64) -> usize {
    let stmt = plan(
        client,
        include_str!("../../sql/queries/queue_reap_expired.sql"),
        &[types::INT8, types::TIMESTAMPTZ],
    );
    let reaped = client
        .select(&*stmt, None, &[limit.into(), timestamp(clock_now()).into()])
        .map(|rows| rows.len())
        .or_raise();
    wake::jobs_added(None, reaped);
    reaped
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

/// The route of `p_queues`: NULL for every queue; otherwise at least one
/// name, none NULL or blank, each once, in the order given.
pub(crate) fn route(p_queues: Option<TextArray>) -> Route {
    let Some(TextArray(given)) = p_queues else { return Route::Every };
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
    limited_queue_full: bool,
    /// A limited queue had every claim turn taken: they end within a commit.
    limited_queue_busy: bool,
}

/// One look at the queue: claims up to `batch` jobs along `route`. Queues
/// with a concurrency limit are claimed from in their turn; a consumer of
/// every queue takes their jobs after the others'.
fn claim(client: &SpiClient<'_>, batch: i32, worker: &Text, lease: Interval, scope: &Scope, route: &Route) -> Look {
    let mut look = Look { jobs: Vec::new(), limited_queue_full: false, limited_queue_busy: false };
    let jobs = &mut look.jobs;
    match route {
        Route::Legacy => claim_from(client, batch, worker, lease, scope, Source::Legacy, jobs),
        Route::Every => {
            claim_from(client, batch, worker, lease, scope, Source::Every, jobs);
            if (jobs.len() as i32) < batch {
                for (queue, max) in limited_queues(client, None) {
                    let limited = claim_limited(client, batch, worker, lease, scope, &queue, max, jobs);
                    note(&mut look.limited_queue_full, &mut look.limited_queue_busy, limited);
                    if jobs.len() as i32 >= batch {
                        break;
                    }
                }
            }
        }
        Route::Queues(queues) => {
            // The settings are read only when a queue gives nothing: the
            // claim statement itself takes nothing from a limited queue, so
            // a claim that fills its batch costs one statement.
            let mut limited: Option<Vec<(Text, i32)>> = None;
            for queue in queues {
                let before = jobs.len();
                claim_from(client, batch, worker, lease, scope, Source::Queue(queue, false), jobs);
                if jobs.len() == before {
                    let limited = limited.get_or_insert_with(|| limited_queues(client, Some(queues)));
                    if let Some((_, max)) = limited.iter().find(|(name, _)| name == queue) {
                        let limited = claim_limited(client, batch, worker, lease, scope, queue, *max, jobs);
                        note(&mut look.limited_queue_full, &mut look.limited_queue_busy, limited);
                    }
                }
                if jobs.len() as i32 >= batch {
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
        wake::jobs_claimed(queue, look.jobs.len(), expiry);
    }
    look
}

/// The running queues with a concurrency limit among `queues` (all when None).
fn limited_queues(client: &SpiClient<'_>, queues: Option<&[Text]>) -> Vec<(Text, i32)> {
    let stmt = plan(client, include_str!("../../sql/queries/queue_limited.sql"), &[types::TEXT_ARRAY]);
    client
        .select(&*stmt, None, &[queues.map(<[Text]>::to_vec).into()])
        .and_then(|rows| {
            rows.map(|row| Ok((row.get::<Text>(1)?.unwrap_or_default(), row.get::<i32>(2)?.unwrap_or_default())))
                .collect()
        })
        .or_raise()
}

/// Claims from `queue`, limited to `max` processing jobs, into `jobs`.
///
/// Claims of a limited queue take turns: up to min(max, QUEUE_TURNS) at
/// once, each holding its turn (a transaction-level lock) until its
/// transaction ends and claiming at most `max / turns` jobs in it (a later
/// claim in the same transaction takes another turn). A claim
/// first takes a free turn, then counts the turns others hold (claims in
/// flight, whose jobs it may not see yet), and only then counts the
/// processing jobs it sees: a claim that commits between the two counts is
/// counted twice, never missed. So processing jobs, committed or in flight,
/// never exceed the limit.
#[allow(clippy::too_many_arguments)]
fn claim_limited(
    client: &SpiClient<'_>,
    batch: i32,
    worker: &Text,
    lease: Interval,
    scope: &Scope,
    queue: &Text,
    max: i32,
    jobs: &mut Vec<Job>,
) -> Limited {
    use crate::lock_keys::{try_lock_queue_turn, unlock_queue_turn, TryLock, QUEUE_TURNS};
    // An older snapshot would miss the claims of turns that ended before it.
    if unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        raise_with_hint(
            pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            format!("queue \"{}\" has a concurrency limit, which claims can keep only in READ COMMITTED", queue.shown()),
            "Claim in a READ COMMITTED transaction.",
        );
    }
    let stmt = plan(client, include_str!("../../sql/queries/queue_processing.sql"), &[types::TEXT]);
    let count_processing = || client.select(&*stmt, None, &[queue.into()]).and_then(first_value::<i64>).or_raise().unwrap_or(0);
    // Full already: no turn taken, so as not to make others count it in flight.
    if count_processing() >= max as i64 {
        return Limited::Full;
    }
    let turns = (max.max(1) as u32).min(QUEUE_TURNS);
    let per_turn = (max.max(1) as u32 / turns) as i64;
    // A turn this transaction already claimed in is not taken again: others
    // count each turn as at most `per_turn` jobs.
    let Some(mine) = (0..turns).find(|turn| try_lock_queue_turn(queue.bytes(), *turn) == TryLock::Acquired) else {
        return Limited::Busy;
    };
    let mut in_flight = 0;
    for turn in (0..turns).filter(|turn| *turn != mine) {
        match try_lock_queue_turn(queue.bytes(), turn) {
            TryLock::Busy => in_flight += 1,
            TryLock::Acquired => unlock_queue_turn(queue.bytes(), turn),
            // Ours, earlier in this transaction: its jobs are in our snapshot.
            TryLock::AlreadyHeld => {}
        }
    }
    let processing = count_processing();
    let room = (max as i64 - processing - in_flight * per_turn).clamp(0, per_turn);
    let before = jobs.len();
    if room > 0 {
        let upto = (before as i64 + room).min(batch as i64) as i32;
        claim_from(client, upto, worker, lease, scope, Source::Queue(queue, true), jobs);
    }
    if jobs.len() == before {
        unlock_queue_turn(queue.bytes(), mine);
    }
    match room > (jobs.len() - before) as i64 {
        true => Limited::Room,
        false => Limited::Full,
    }
}

/// What a claim of a limited queue left.
#[derive(PartialEq)]
enum Limited {
    /// Room for more than it claimed.
    Room,
    /// No room left (until a completion).
    Full,
    /// Every claim turn was taken (until a claim commits).
    Busy,
}

fn note(full: &mut bool, busy: &mut bool, limited: Limited) {
    *full |= limited == Limited::Full;
    *busy |= limited == Limited::Busy;
}

/// What one claim statement reads.
enum Source<'a> {
    Legacy,
    Every,
    /// One queue; with true, also when it has a concurrency limit (the
    /// caller holds its claim turn and asks for no more than the room).
    Queue(&'a Text, bool),
}

/// Claims into `jobs` until it holds `batch`, from `source`. Rows the
/// statement made dead (an expired lease with no attempt left) are not
/// handed out; while any were, it looks again for the jobs they displaced.
fn claim_from(
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

/// When the next job becomes claimable with time alone (a lease running out
/// or a run_after coming), if before `until`.
fn next_due(
    client: &SpiClient<'_>,
    now: pg_sys::TimestampTz,
    until: pg_sys::TimestampTz,
    scope: &Scope,
    route: &Route,
) -> Option<pg_sys::TimestampTz> {
    let mut arguments = vec![timestamp(now).into(), timestamp(until).into(), scope.as_parameter().into()];
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
            plan(
                client,
                include_str!("../../sql/queries/queue_next_due.sql"),
                &[types::TIMESTAMPTZ, types::TIMESTAMPTZ, types::TEXT_ARRAY, types::TEXT_ARRAY],
            )
        }
    };
    client
        .select(&*stmt, None, &arguments)
        .and_then(first_value::<TimestampWithTimeZone>)
        .or_raise()
        .map(|due| due.into_inner())
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

/// Each look needs a snapshot that includes what committed since the last
/// one, which only READ COMMITTED gives.
fn require_read_committed() {
    if unsafe { pg_sys::XactIsoLevel } >= pg_sys::XACT_REPEATABLE_READ as i32 {
        raise_with_hint(
            pgrx::PgSqlErrorCode::ERRCODE_FEATURE_NOT_SUPPORTED,
            "consume_task cannot wait (p_wait) in a REPEATABLE READ or SERIALIZABLE transaction",
            "Its snapshot would never show new jobs: wait in a READ COMMITTED transaction, or pass p_wait => NULL.",
        );
    }
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
    let lease = positive_interval(p_lease, "p_lease");
    let wait = wait_micros(p_wait);
    crate::errors::require_primary("consume jobs");
    let mut deadline = clock_now().saturating_add(wait);
    // Resolved in the first look's connection: a second SPI connection and
    // rights switch per claim would cost the hot path.
    let mut given_worker = Some(p_worker_id);
    let mut worker: Option<Text> = None;
    let mut sleeper: Option<Sleeper> = None;
    let mut restricted = false;
    loop {
        let (look, due) = crate::access::connect(|client| {
            let worker = worker.get_or_insert_with(|| {
                let resolved = resolve_worker(client, given_worker.take().flatten());
                if before(client, &resolved) {
                    deadline = deadline.min(clock_now());
                }
                resolved
            });
            let scope = scopes::of_caller(Capability::Consumer);
            restricted = matches!(*scope, Scope::Prefixes(_));
            let look = claim(client, p_batch, worker, lease, &scope, &route);
            let due = if look.jobs.is_empty() && sleeper.is_some() {
                next_due(client, clock_now(), deadline, &scope, &route)
            } else {
                None
            };
            (look, due)
        });
        let now = clock_now();
        if !look.jobs.is_empty() || now >= deadline {
            return look.jobs;
        }
        // Neither a completion that makes room in a full limited queue nor
        // the end of a claim's turn wakes anyone (waking those who wait for
        // room made them crowd the turns): look again soon.
        let soon = match (look.limited_queue_busy, look.limited_queue_full) {
            (true, _) => Some(BUSY_TURNS_RETRY_MS),
            (false, true) => Some(wake::POLL_INTERVAL_MS),
            (false, false) => None,
        };
        let due = match soon {
            Some(ms) => Some(due.unwrap_or(deadline).min(now + ms * 1000)),
            None => due,
        };
        match &sleeper {
            // Registered before looking once more, so that no commit between
            // the look and the sleep goes unnoticed.
            None => {
                require_read_committed();
                let queues = match &route {
                    Route::Queues(queues) => Some(&queues[..]),
                    Route::Every | Route::Legacy => None,
                };
                sleeper = Some(Sleeper::new(queues, restricted));
            }
            Some(sleeper) => {
                let until = due.map_or(deadline, |due| due.min(deadline));
                sleeper.sleep((until - now + 999) / 1000);
            }
        }
    }
}

/// Claims the next runnable job (highest priority, then oldest) of the
/// queues `p_queues` (tried in the order given; NULL: every queue) with a
/// lease; zero rows when there is none, after waiting up to `p_wait` for
/// one. A NULL worker id falls back to the session's application_name or
/// client address.
#[pg_extern(name = "consume_task")]
fn consume_task_from_queues(
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
    ),
> {
    TableIterator::new(consume(1, p_worker_id, p_lease, p_wait, route(p_queues)))
}

/// Claims up to `p_batch` (1..1000) runnable jobs of the queues `p_queues`
/// in one call, after waiting up to `p_wait` for the first.
#[pg_extern(name = "consume_tasks")]
fn consume_tasks_from_queues(
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
    ),
> {
    let batch = int_in_range(p_batch, "p_batch", 1..=MAX_BATCH);
    TableIterator::new(consume(batch, p_worker_id, p_lease, p_wait, route(p_queues)))
}
