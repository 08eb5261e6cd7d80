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
//! follows committed after it, a queue resumed, a scope or a queue limit
//! that passed jobs over. None is lost or waits for long: a claim that finds
//! fewer jobs than it asked for after the point looks again from the head
//! (so it returns fewer only when the whole index has no more), a backend
//! starts from the head again at least every `HEAD_EVERY_US`, so such a job
//! waits at most that long behind newer ones, and a transaction that
//! claimed and rolled back makes its backend start from the head.

use pgrx::pg_sys::TimestampTz;

use crate::text::Text;

/// How long a backend keeps starting after its last job before it reads
/// the index from the head again.
pub(crate) const HEAD_EVERY_US: i64 = 100_000;

/// A place in the claim's index, whose order is priority descending, then
/// run_after, then id.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Place {
    pub priority: i32,
    pub run_after: TimestampTz,
    pub id: i64,
}

impl Place {
    /// Before every job: the highest priority, the earliest time, the
    /// lowest id.
    pub(crate) const HEAD: Place = Place { priority: i32::MAX, run_after: TimestampTz::MIN, id: i64::MIN };

    fn index_order(&self) -> (std::cmp::Reverse<i32>, TimestampTz, i64) {
        (std::cmp::Reverse(self.priority), self.run_after, self.id)
    }

    /// The later of the two in the index's order.
    pub(crate) fn later(self, other: Place) -> Place {
        if other.index_order() > self.index_order() {
            other
        } else {
            self
        }
    }
}

/// Where this backend's claims from one queue (None: from every queue)
/// start, and since when it has not started from the head.
struct QueueStart {
    queue: Option<Text>,
    place: Place,
    since: TimestampTz,
}

/// A consumer of a handful of queues keeps a handful of starts; more than
/// this are forgotten rather than searched.
const MOST_STARTS: usize = 16;

thread_local! {
    static STARTS: std::cell::RefCell<Vec<QueueStart>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where the next claim from `queue` starts at time `now`.
pub(crate) fn start(queue: Option<&Text>, now: TimestampTz) -> Place {
    STARTS.with(|starts| {
        let mut starts = starts.borrow_mut();
        match starts.iter().position(|s| s.queue.as_ref() == queue) {
            Some(at) if now - starts[at].since < HEAD_EVERY_US && now >= starts[at].since => starts[at].place,
            Some(at) => {
                starts.swap_remove(at);
                Place::HEAD
            }
            None => Place::HEAD,
        }
    })
}

/// After a claim from `queue` that started at `from` and claimed up to
/// `furthest` (None: nothing): the next starts there, or from the head when
/// this one read from the head and claimed nothing.
pub(crate) fn claimed(queue: Option<&Text>, from: Place, furthest: Option<Place>, now: TimestampTz) {
    STARTS.with(|starts| {
        let mut starts = starts.borrow_mut();
        let at = starts.iter().position(|s| s.queue.as_ref() == queue);
        match (at, furthest) {
            // Nothing from the head: no job to start after. Nothing after a
            // start says nothing of the head, which the caller reads next.
            (Some(at), None) if from == Place::HEAD => {
                starts.swap_remove(at);
            }
            (Some(_), None) => {}
            (Some(at), Some(place)) => {
                starts[at].place = place;
                if from == Place::HEAD {
                    starts[at].since = now;
                }
            }
            (None, Some(place)) => {
                if starts.len() >= MOST_STARTS {
                    starts.clear();
                }
                starts.push(QueueStart { queue: queue.cloned(), place, since: now });
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
