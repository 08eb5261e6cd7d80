//! Where a claim starts reading the runnable index: after the last job this
//! backend claimed from the same queue (or from every queue), not at the
//! head.
//!
//! A claimed job leaves its runnable version's index entry behind until
//! vacuum removes it, and those entries pile up at the head of the index,
//! where every claim used to start: with 16 consumers a claim of one job
//! stepped over ~145 index pages of them. Started after its own last job, a
//! claim steps over only the entries of jobs claimed since.
//!
//! Jobs can become runnable behind that point: a claim another consumer
//! rolled back, a producer whose transaction began before the job it
//! follows committed after it, a failed attempt's retry, a queue resumed.
//! With shared memory, every commit that makes jobs runnable (and every
//! abort of a claim) writes where the earliest of them lies to the runnable
//! log (see wake.rs), and a claim starts at the earliest of its backend's
//! place and the places the log got since that place was found (or at the
//! head when the log has moved on too far to tell): reading from there it
//! reads every job it could claim, so a claim that finds fewer jobs than it
//! asked for has found all there are. Only in READ COMMITTED, where each
//! claim statement's snapshot is taken after it reads the log.
//!
//! Without the log (no shared memory, or a transaction that keeps one
//! snapshot), a claim that finds fewer jobs than it asked for after the
//! point looks again from the head, so it returns fewer only when the
//! whole index has no more, and a backend starts from the head again at
//! least every `HEAD_EVERY_US`, so a job made runnable behind it waits at
//! most that long behind newer ones. With the log, only what writes no log
//! entry (a backend still running a library older than the log, a change
//! by hand, a change to a role's scopes, COMMIT or ROLLBACK PREPARED) puts
//! a job behind where claims start, and a backend starts from the head
//! again at least every `HEAD_EVERY_WITH_LOG_US`, or later while its last
//! read from the head stepped over many index entries that nothing could
//! remove or mark dead since (a held snapshot): `HEAD_EVERY_PER_ENTRY_US`
//! per entry, up to `HEAD_EVERY_MOST_US`. A transaction that claimed and
//! rolled back makes its own backend start from the head.

use std::cell::Cell;

use pgrx::pg_sys::{self, TimestampTz};

use super::entries_read::SteppedOver;
use super::place::Place;
use crate::shared::runnable_log;
use crate::text::Text;

/// How long a backend keeps starting after its last job before it reads
/// the index from the head again: without the runnable log, and with it.
pub(crate) const HEAD_EVERY_US: i64 = 100_000;
pub(crate) const HEAD_EVERY_WITH_LOG_US: i64 = 1_000_000;

/// With the log, a read from the head is only the net for what writes no
/// log entry. While a snapshot is held (an analytics query, a forgotten
/// `BEGIN`), nothing can remove or mark dead the index entries of the jobs
/// claimed since, so such a read steps over every one of them and takes
/// ever longer (0.3 s after a minute of 13,000 jobs/s): sixteen consumers
/// reading from the head every second spent more CPU on it than the
/// machine had. A backend reads from the head again only after
/// `HEAD_EVERY_PER_ENTRY_US` for each index entry its last such read
/// stepped over, and at least every `HEAD_EVERY_MOST_US`: stepping over one
/// costs about 0.3 us (measured here: 40,000 entries of claimed jobs in
/// 12 ms; 800,000 in 0.3 s), so such reads take under 0.2 % of a backend's
/// time, and a read that stepped over fewer than 5,000 entries (no held
/// snapshot: the rows other consumers hold) is repeated within a second.
/// The entries of versions the read could not see count only while they
/// may still be there: once the table's xmin horizon has passed the
/// transactions that were running when the read began, each is dead to
/// all, marked so by a scan that passes it (the first after the hold
/// pays for them once more) or removed by vacuum, and only the rows the
/// read saw and passed over (of a paused or limited queue, outside the
/// caller's scope, and then also those another transaction held) still
/// space the next; with no such queue and no scope, rows passed over can
/// only have been held, and go with the horizon too (claim.rs).
/// Without that, a read after a burst of claims with no snapshot held put
/// the next off by 200 us for each entry it had just marked dead (the third
/// review), and so did the end of a hold, a prepared transaction's
/// included, whose COMMIT or ROLLBACK PREPARED may have made jobs runnable
/// behind the place. Entries, not time: a read that waited for a lock, ran
/// on a starved CPU or returned a thousand large jobs stepped over nothing
/// (see entries_read.rs).
pub(crate) const HEAD_EVERY_PER_ENTRY_US: i64 = 200;
pub(crate) const HEAD_EVERY_MOST_US: i64 = 60_000_000;

/// Where a claim starts, and whether reading from there reads every job it
/// could claim (false: jobs may lie before it that the runnable log did
/// not tell of).
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) struct Origin {
    pub place: Place,
    pub complete: bool,
    /// It came from the shared frontier, directly or through a place of
    /// this backend's that did (since its last read from the head).
    pub shared: bool,
    /// The prepared-transaction epoch in which what vouches for it was
    /// found with no such transaction prepared (None: unknown, or found
    /// while one was): a claim publishes its end only from a start of the
    /// epoch it began in (claim_frontier.rs).
    pub epoch: Option<u64>,
}

impl Origin {
    pub(crate) const HEAD: Origin = Origin { place: Place::HEAD, complete: true, shared: false, epoch: None };
}

/// The runnable log's position now, read before the claim statement takes
/// its snapshot; None when there is no log, or when the transaction's
/// snapshot may be older than this read.
pub(crate) fn log_position() -> Option<u64> {
    let read_committed = unsafe { pg_sys::XactIsoLevel } < pg_sys::XACT_REPEATABLE_READ as i32;
    read_committed.then(runnable_log::log).flatten().map(|log| log.position())
}

/// Where this backend's claims from one queue (None: from every queue)
/// for one role (whose scope decides which jobs it passes over) start,
/// since when it has not started from the head, and the runnable log's
/// position before the claim that found the place (None: unknown).
struct QueueStart {
    queue: Option<Text>,
    role: pg_sys::Oid,
    place: Place,
    since: TimestampTz,
    position: Option<u64>,
    /// What its last read from the head stepped over.
    head_read: HeadRead,
    /// When it last found that the versions that read could not see may
    /// still be there (see `unseen_is_gone`).
    horizon_checked: TimestampTz,
    /// The place came from the shared frontier since the last read from
    /// the head (see Origin).
    shared: bool,
    /// See Origin.
    epoch: Option<u64>,
}

/// A consumer of a handful of queues keeps a handful of starts; more than
/// this are forgotten rather than searched.
const MOST_STARTS: usize = 16;

thread_local! {
    static STARTS: std::cell::RefCell<Vec<QueueStart>> = const { std::cell::RefCell::new(Vec::new()) };
    /// Claims start at their own place only, ignoring the shared frontier.
    static FRONTIER_OFF: Cell<bool> = const { Cell::new(false) };
    /// A claim started at the shared frontier since `frontier_was_used`
    /// last asked.
    static FRONTIER_USED: Cell<bool> = const { Cell::new(false) };
}

/// Whether a claim started at the shared frontier (further than its own
/// place) since the last call.
pub(crate) fn frontier_was_used() -> bool {
    FRONTIER_USED.with(|used| used.replace(false))
}

/// Runs `claims` with every claim starting at its own place (or the head),
/// not at the shared frontier. A consumer about to sleep after a look from
/// the frontier found nothing looks once more so: jobs that a transaction
/// locked and let go unchanged (a user's `SELECT ... FOR UPDATE`) write no
/// log entry, and lie behind the frontier, but not behind the place of a
/// consumer that never passed them (review helper-78: a waiting consumer
/// slept 10 s past two such jobs). One whose own place came from the
/// frontier too sleeps at most a second (consume.rs), so that its next
/// read from the head, spaced as ever, finds them (not a read from the head
/// before every sleep: under a held snapshot each walks every dead entry
/// since the hold began, review helper-81).
pub(crate) fn without_frontier<R>(claims: impl FnOnce() -> R) -> R {
    /// Puts the setting back however the claims end (an error unwinds).
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            FRONTIER_OFF.with(|off| off.set(self.0));
        }
    }
    let _restore = Restore(FRONTIER_OFF.with(|off| off.replace(true)));
    claims()
}

/// How long a backend keeps starting after its last job, the runnable log
/// vouching for what lies behind it or not, its last read from the head
/// having stepped over `stepped_over` index entries that may still be
/// there.
pub(crate) fn head_every(vouched: bool, stepped_over: i64) -> i64 {
    if vouched {
        stepped_over.saturating_mul(HEAD_EVERY_PER_ENTRY_US).clamp(HEAD_EVERY_WITH_LOG_US, HEAD_EVERY_MOST_US)
    } else {
        HEAD_EVERY_US
    }
}

/// Whether every row version a read from the head that began with
/// `next_xid` as the next transaction id could not see is dead to all by
/// now: `distlock.task_queue`'s xmin horizon (the one by which a scan marks
/// an entry dead: this database's snapshots, physical slots, standbys'
/// feedback) has reached it.
fn unseen_is_gone(next_xid: pg_sys::TransactionId) -> bool {
    let table = crate::version::table_oid(c"task_queue");
    unsafe {
        // The lock the claim statement takes next anyway: a weaker one
        // first would be a lock upgrade, which can deadlock with DDL that
        // holds SHARE and wants ACCESS EXCLUSIVE. Without the table (gone
        // meanwhile), the horizon of every database, never later than its.
        let relation = if table == pg_sys::InvalidOid {
            std::ptr::null_mut()
        } else {
            pg_sys::try_relation_open(table, pg_sys::RowExclusiveLock as pg_sys::LOCKMODE)
        };
        let horizon = pg_sys::GetOldestNonRemovableTransactionId(relation);
        if !relation.is_null() {
            pg_sys::relation_close(relation, pg_sys::NoLock as pg_sys::LOCKMODE);
        }
        pg_sys::TransactionIdFollowsOrEquals(horizon, next_xid)
    }
}

/// Where the next claim from `queue` by `role` starts at time `now`, the
/// runnable log being at `position` (see `log_position`). `unscoped`: the
/// role may claim every job of the queue, so that where the other
/// unscoped claims got to (the shared frontier) holds for it too.
pub(crate) fn start(
    queue: Option<&Text>,
    role: pg_sys::Oid,
    now: TimestampTz,
    position: Option<u64>,
    unscoped: bool,
) -> Origin {
    STARTS.with(|starts| {
        let mut starts = starts.borrow_mut();
        let Some(at) = starts.iter().position(|s| s.queue.as_ref() == queue && s.role == role) else {
            return Origin::HEAD;
        };
        let QueueStart { place, since, position: found_at, head_read, horizon_checked, shared: place_shared, epoch, .. } =
            starts[at];
        let vouched = found_at.is_some() && position.is_some();
        let SteppedOver { unseen, passed } = head_read.stepped_over;
        let every = head_every(vouched, unseen.saturating_add(passed));
        let elapsed = now - since;
        let mut from_head = elapsed >= every || now < since;
        // Once what it could not see is gone, only what it saw and passed
        // over spaces the next; looked at most once a second: it reads
        // every backend's xmin.
        if !from_head
            && elapsed >= head_every(vouched, passed)
            && now - horizon_checked >= HEAD_EVERY_WITH_LOG_US
        {
            starts[at].horizon_checked = now;
            from_head = unseen_is_gone(head_read.next_xid);
        }
        if from_head {
            starts.swap_remove(at);
            return Origin::HEAD;
        }
        let (Some(after), Some(upto), Some(log)) = (found_at, position, runnable_log::log()) else {
            return Origin { place, complete: false, shared: false, epoch: None };
        };
        let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
        let frontier_key = if unscoped { super::wake::frontier_key(queue) } else { None };
        let queue = queue.map(|queue| super::wake::queue_hash(queue.bytes()));
        // The earliest of a place vouched for by the log at `after` and of
        // what the log got since: no claimable job lies before it.
        let vouched_start = |place: Place, after: u64| {
            let mut earliest = place;
            let read = log.read(after, upto, database, queue, |(priority, run_after, id)| {
                earliest = earliest.min(Place { priority, run_after, id });
            });
            read.ok().map(|_| earliest)
        };
        let Some(mut earliest) = vouched_start(place, after) else {
            return Origin { place, complete: false, shared: false, epoch: None };
        };
        // Where the others got to, when it is further: both hold, the later
        // one steps over fewer of the jobs claimed since.
        let frontier_key = frontier_key.filter(|_| !FRONTIER_OFF.with(Cell::get));
        let (mut shared, mut epoch) = (place_shared, epoch);
        if place_shared {
            FRONTIER_USED.with(|used| used.set(true));
        }
        if let Some(frontier) = frontier_key.and_then(|key| crate::shared::claim_frontier::frontier()?.read(database, key)) {
            let (priority, run_after, id) = frontier.key;
            if let Some(further) = vouched_start(Place { priority, run_after, id }, frontier.position) {
                if further > earliest {
                    earliest = further;
                    shared = true;
                    epoch = Some(frontier.epoch);
                    FRONTIER_USED.with(|used| used.set(true));
                }
            }
        }
        if let Some(uncommitted) = super::wake::uncommitted_earliest(queue) {
            earliest = earliest.min(uncommitted);
        }
        Origin { place: earliest, complete: true, shared, epoch }
    })
}

/// What a read from the head met: the index entries it stepped over, and
/// the next transaction id when it began (every version it could not see
/// was made, or made dead, by a transaction before that).
#[derive(Clone, Copy, Default, Debug, PartialEq)]
pub(crate) struct HeadRead {
    pub stepped_over: SteppedOver,
    pub next_xid: pg_sys::TransactionId,
}

/// After a claim from `queue` by `role` that started `from` with the
/// runnable log at `position` and claimed up to `furthest` (None: nothing),
/// having met `head_read` when it read from the head: the next starts
/// there, or from the head when this one read from the head and claimed
/// nothing. An unscoped claim's end is also the others' (the shared
/// frontier), when the log vouches for it and it began in `frontier_epoch`
/// (None: a scoped claim, or one that may not publish; see
/// `claim_frontier::publishable_epoch`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn claimed(
    queue: Option<&Text>,
    role: pg_sys::Oid,
    from: Origin,
    furthest: Option<Place>,
    now: TimestampTz,
    position: Option<u64>,
    head_read: HeadRead,
    frontier_epoch: Option<u64>,
) {
    // What the log said holds from where the claim ended only when it read
    // every job it could claim before that.
    let position = position.filter(|_| from.complete);
    // And it holds for the others only when its start was found in the
    // epoch the claim began in (review helper-79: a place found while a
    // claim was prepared passed its jobs, and after ROLLBACK PREPARED the
    // backend's next claim published past them).
    let frontier_epoch = frontier_epoch.filter(|epoch| from.place == Place::HEAD || from.epoch == Some(*epoch));
    // Published once the claim commits: a claim rolled back (or prepared,
    // then rolled back) gives its jobs back, and not every such path writes
    // the runnable log (a look failing in its second queue, ROLLBACK
    // PREPARED), which other backends would then step over for good
    // (review helper-76).
    if let (Some(epoch), Some(place), Some(position)) = (frontier_epoch, furthest, position) {
        if let Some(key) = super::wake::frontier_key(queue) {
            let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
            crate::xact::after_commit(Box::new(move || {
                if let Some(frontier) = crate::shared::claim_frontier::frontier() {
                    frontier.publish(database, key, place.key(), position, epoch);
                }
            }));
        }
    }
    STARTS.with(|starts| {
        let mut starts = starts.borrow_mut();
        let at = starts.iter().position(|s| s.queue.as_ref() == queue && s.role == role);
        match (at, furthest) {
            // Nothing from the head: no job to start after.
            (Some(at), None) if from.place == Place::HEAD => {
                starts.swap_remove(at);
            }
            // Nothing after a start the log vouched for: start there again.
            // Nothing after another start says nothing of the head, which
            // the caller reads next. Nor is a start at the shared frontier
            // taken as its own: a look about to sleep looks once more from
            // its own place (without_frontier).
            (Some(at), None) => {
                if position.is_some() && !from.shared {
                    starts[at].place = from.place;
                    starts[at].position = position;
                    starts[at].epoch = frontier_epoch;
                }
            }
            (Some(at), Some(place)) => {
                starts[at].place = place;
                starts[at].position = position;
                starts[at].shared = from.shared;
                starts[at].epoch = frontier_epoch;
                if from.place == Place::HEAD {
                    starts[at].since = now;
                    starts[at].head_read = head_read;
                    starts[at].horizon_checked = now;
                }
            }
            (None, Some(place)) => {
                if starts.len() >= MOST_STARTS {
                    starts.clear();
                }
                // A first claim reads from the head: what it met is what the next meets.
                let head_read = if from.place == Place::HEAD { head_read } else { HeadRead::default() };
                starts.push(QueueStart {
                    queue: queue.cloned(),
                    role,
                    place,
                    since: now,
                    position,
                    head_read,
                    horizon_checked: now,
                    shared: from.shared,
                    epoch: frontier_epoch,
                });
            }
            (None, None) => {}
        }
    });
    if furthest.is_some() {
        forget_on_abort();
    }
}

/// What this backend's last read from the head along `queue` for `role` met,
/// while it keeps a start there.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) fn last_head_read(queue: Option<&Text>, role: pg_sys::Oid) -> Option<HeadRead> {
    STARTS.with(|starts| starts.borrow().iter().find(|s| s.queue.as_ref() == queue && s.role == role).map(|s| s.head_read))
}

/// Forgets every start, as a new backend would have none.
#[cfg(any(test, feature = "pg_test"))]
pub(crate) fn forget_starts() {
    STARTS.with(|starts| starts.borrow_mut().clear());
}

thread_local! {
    /// The subtransaction in which `forget_on_abort` last registered (0: none).
    static FORGET_ARMED_IN: Cell<pg_sys::SubTransactionId> = const { Cell::new(0) };
}

/// The jobs a transaction claimed are runnable again if it aborts (or if
/// the savepoint that claimed them is rolled back), behind where this
/// backend would start, and so are they if it is prepared and then rolled
/// back: it starts from the head again. Registered once per subtransaction
/// that claims (review helper-78: a savepoint rolled back after a claim
/// outside it kept the place past its jobs), and forgotten at PREPARE (a
/// ROLLBACK PREPARED in any session gives the jobs back).
fn forget_on_abort() {
    let subxact = unsafe { pg_sys::GetCurrentSubTransactionId() };
    if FORGET_ARMED_IN.with(|armed| armed.replace(subxact)) == subxact {
        return;
    }
    let forget = || STARTS.with(|starts| starts.borrow_mut().clear());
    crate::xact::on_outcome(None, Some(Box::new(forget)));
    crate::xact::at_prepare(Box::new(forget));
    crate::xact::at_end(Box::new(move || {
        FORGET_ARMED_IN.with(|armed| {
            if armed.get() == subxact {
                armed.set(0);
            }
        })
    }));
}
