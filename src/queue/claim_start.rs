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
//! by hand, a change to a role's scopes) puts a job behind where claims
//! start, and a backend starts from the head again at least every
//! `HEAD_EVERY_WITH_LOG_US`, or `HEAD_READ_SPACING` times the CPU time its
//! last read from the head took when that was longer (a held snapshot), up
//! to `HEAD_EVERY_MOST_US`. A transaction that claimed and rolled back
//! makes its own backend start from the head.

use pgrx::pg_sys::{self, TimestampTz};

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
/// machine had. A backend reads from the head again only after this many
/// times the CPU time its last such read took (not the clock's: a read
/// that waited for a lock cost nothing meanwhile), and at least every
/// `HEAD_EVERY_MOST_US`: reads that cost more than 10 ms of CPU (a held
/// snapshot, or claims of hundreds of large jobs) are spaced out.
pub(crate) const HEAD_READ_SPACING: i64 = 100;
pub(crate) const HEAD_EVERY_MOST_US: i64 = 60_000_000;

/// Where a claim starts, and whether reading from there reads every job it
/// could claim (false: jobs may lie before it that the runnable log did
/// not tell of).
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) struct Origin {
    pub place: Place,
    pub complete: bool,
}

impl Origin {
    pub(crate) const HEAD: Origin = Origin { place: Place::HEAD, complete: true };
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
    /// The CPU time its last read from the head took (microseconds) beyond
    /// what claiming the jobs it claimed costs (see `CLAIM_CPU_PER_JOB_US`).
    head_read_us: i64,
}

/// A consumer of a handful of queues keeps a handful of starts; more than
/// this are forgotten rather than searched.
const MOST_STARTS: usize = 16;

thread_local! {
    /// What claiming one job costs this backend in CPU time, read from its
    /// last claim after a place that claimed any: a read from the head that
    /// claims a thousand large jobs is not slow for what it steps over.
    /// Until a backend knows (its first claims read from the head), its
    /// reads from the head count as cheap.
    static CLAIM_CPU_PER_JOB_US: std::cell::Cell<Option<i64>> = const { std::cell::Cell::new(None) };
    static STARTS: std::cell::RefCell<Vec<QueueStart>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// How long a backend keeps starting after its last job, the runnable log
/// vouching for what lies behind it or not, its last read from the head
/// having cost `head_read_us` of CPU beyond what claiming its jobs costs.
pub(crate) fn head_every(vouched: bool, head_read_us: i64) -> i64 {
    if vouched {
        head_read_us.saturating_mul(HEAD_READ_SPACING).clamp(HEAD_EVERY_WITH_LOG_US, HEAD_EVERY_MOST_US)
    } else {
        HEAD_EVERY_US
    }
}

/// Where the next claim from `queue` by `role` starts at time `now`, the
/// runnable log being at `position` (see `log_position`).
pub(crate) fn start(queue: Option<&Text>, role: pg_sys::Oid, now: TimestampTz, position: Option<u64>) -> Origin {
    STARTS.with(|starts| {
        let mut starts = starts.borrow_mut();
        let Some(at) = starts.iter().position(|s| s.queue.as_ref() == queue && s.role == role) else {
            return Origin::HEAD;
        };
        let QueueStart { place, since, position: found_at, head_read_us, .. } = starts[at];
        if now - since >= head_every(found_at.is_some() && position.is_some(), head_read_us) || now < since {
            starts.swap_remove(at);
            return Origin::HEAD;
        }
        let (Some(after), Some(upto), Some(log)) = (found_at, position, runnable_log::log()) else {
            return Origin { place, complete: false };
        };
        let database = unsafe { pg_sys::MyDatabaseId }.to_u32();
        let queue = queue.map(|queue| super::wake::queue_hash(queue.bytes()));
        let mut earliest = place;
        let read = log.read(after, upto, database, queue, |(priority, run_after, id)| {
            earliest = earliest.min(Place { priority, run_after, id });
        });
        if read.is_err() {
            return Origin { place, complete: false };
        }
        if let Some(uncommitted) = super::wake::uncommitted_earliest(queue) {
            earliest = earliest.min(uncommitted);
        }
        Origin { place: earliest, complete: true }
    })
}

/// What a claim statement cost: its CPU time (not the clock's: a claim that
/// waited for a lock cost nothing meanwhile) and the jobs it handed out.
#[derive(Clone, Copy)]
pub(crate) struct ClaimCost {
    pub cpu_us: i64,
    pub jobs: usize,
}

/// After a claim from `queue` by `role` that started `from` with the runnable log at
/// `position`, cost `cost` and claimed up to `furthest` (None: nothing): the next
/// starts there, or from the head when this one read from the head and
/// claimed nothing.
pub(crate) fn claimed(
    queue: Option<&Text>,
    role: pg_sys::Oid,
    from: Origin,
    furthest: Option<Place>,
    now: TimestampTz,
    position: Option<u64>,
    cost: ClaimCost,
) {
    let ClaimCost { cpu_us, jobs } = cost;
    let per_job = CLAIM_CPU_PER_JOB_US.with(|per_job| {
        if from.place != Place::HEAD && jobs > 0 {
            per_job.set(Some(cpu_us / jobs as i64));
        }
        per_job.get()
    });
    let head_read_beyond_jobs =
        per_job.map_or(0, |per_job| cpu_us.saturating_sub(per_job.saturating_mul(jobs as i64)).max(0));
    // What the log said holds from where the claim ended only when it read
    // every job it could claim before that.
    let position = position.filter(|_| from.complete);
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
            // the caller reads next.
            (Some(at), None) => {
                if position.is_some() {
                    starts[at].place = from.place;
                    starts[at].position = position;
                }
            }
            (Some(at), Some(place)) => {
                starts[at].place = place;
                starts[at].position = position;
                if from.place == Place::HEAD {
                    starts[at].since = now;
                    starts[at].head_read_us = head_read_beyond_jobs;
                }
            }
            (None, Some(place)) => {
                if starts.len() >= MOST_STARTS {
                    starts.clear();
                }
                // A first claim reads from the head: what it took is what the next costs.
                let head_read_us = if from.place == Place::HEAD { head_read_beyond_jobs } else { 0 };
                starts.push(QueueStart { queue: queue.cloned(), role, place, since: now, position, head_read_us });
            }
            (None, None) => {}
        }
    });
    if furthest.is_some() {
        forget_on_abort();
    }
}

thread_local! {
    static FORGET_ON_ABORT: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// The jobs a transaction claimed are runnable again if it aborts, behind
/// where this backend would start: it starts from the head again.
fn forget_on_abort() {
    if FORGET_ON_ABORT.with(|armed| armed.replace(true)) {
        return;
    }
    crate::xact::on_outcome(None, Some(Box::new(|| STARTS.with(|starts| starts.borrow_mut().clear()))));
    crate::xact::at_end(Box::new(|| FORGET_ON_ABORT.with(|armed| armed.set(false))));
}
