//! Claims of a queue with a concurrency limit: at most N of its jobs
//! processing at once across all consumers, exactly, with up to min(N, 16)
//! claims running at a time.

use crate::text::Text;
use pgrx::spi::SpiClient;

use super::claim::{claim_from, clock_now, timestamp, Claimant, Job, Source, Start};
use crate::errors::OrRaise;
use crate::plans::{first_two, plan, types};

/// The running queues with a concurrency limit among `queues` (all when None).
pub(crate) fn limited_queues(client: &SpiClient<'_>, queues: Option<&[Text]>) -> Vec<(Text, i32)> {
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
pub(crate) fn claim_limited(
    client: &SpiClient<'_>,
    batch: i32,
    claimant: &Claimant<'_>,
    queue: &Text,
    max: i32,
    jobs: &mut Vec<Job>,
) -> Limited {
    use crate::lock_keys::{queue_turn_held_by_another, try_lock_queue_turn, unlock_queue_turn, TryLock, QUEUE_TURNS};
    // An older snapshot would miss the claims of turns that ended before it.
    crate::errors::require_read_committed(
        &format!("queue \"{}\" has a concurrency limit, which claims can keep only in READ COMMITTED", queue.shown()),
        "Claim in a READ COMMITTED transaction.",
    );
    let turns = (max.max(1) as u32).min(QUEUE_TURNS);
    let per_turn = (max.max(1) as u32 / turns) as i64;
    // A turn this transaction already claimed in is not taken again: others
    // count each turn as at most `per_turn` jobs.
    let Some(mine) = (0..turns).find(|turn| try_lock_queue_turn(queue.bytes(), *turn) == TryLock::Acquired) else {
        return Limited { room: Room::Busy, changed: false };
    };
    // A turn ours from earlier in this transaction is not in flight: its
    // jobs are in our snapshot.
    let in_flight = (0..turns)
        .filter(|turn| *turn != mine && queue_turn_held_by_another(queue.bytes(), *turn))
        .count() as i64;
    let (processing, took_back) = processing_jobs(client, queue);
    let room = (max as i64 - processing - in_flight * per_turn).clamp(0, per_turn);
    let before = jobs.len();
    let mut made_dead = false;
    if room > 0 {
        let upto = (before as i64 + room).min(batch as i64) as i32;
        made_dead = claim_from(client, upto, claimant, Source::Queue(queue, true), Start::Remembered, jobs).made_dead;
    }
    if jobs.len() == before {
        unlock_queue_turn(queue.bytes(), mine);
    }
    let room_left = match room > (jobs.len() - before) as i64 {
        true => Room::Left,
        false => Room::Full,
    };
    Limited { room: room_left, changed: took_back || made_dead }
}

/// How many jobs of `queue` are processing, after taking back those whose
/// lease ran out: their consumers are gone, and they would hold the
/// queue's room until a sweep (the takeover in the claim statement comes
/// only with room). With whether it took any back.
fn processing_jobs(client: &SpiClient<'_>, queue: &Text) -> (i64, bool) {
    let now = timestamp(clock_now());
    let stmt = plan(client, include_str!("../../sql/queries/queue_processing.sql"), &[types::TEXT, types::TIMESTAMPTZ]);
    let (processing, expired) = client
        .select(&*stmt, None, &[queue.into(), now.into()])
        .and_then(first_two::<i64, i64>)
        .or_raise()
        .map_or((0, 0), |(processing, expired)| (processing.unwrap_or(0), expired.unwrap_or(0)));
    if expired == 0 {
        return (processing, false);
    }
    let taken_back = super::reap::reap_expired_leases_of(client, expired, Some(queue));
    (processing - taken_back as i64, taken_back > 0)
}

/// What a claim of a limited queue left, and whether it changed what must
/// commit whatever it claimed (took back jobs whose lease ran out, or made
/// such jobs dead).
pub(crate) struct Limited {
    pub room: Room,
    pub changed: bool,
}

#[derive(PartialEq)]
pub(crate) enum Room {
    /// Room for more than it claimed.
    Left,
    /// No room left (until a completion).
    Full,
    /// Every claim turn was taken (until a claim commits).
    Busy,
}

