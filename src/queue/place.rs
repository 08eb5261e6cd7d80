//! A place in the claim's index: where a claim starts or ended, and where
//! the earliest of the jobs a commit made runnable lies.

use pgrx::pg_sys::TimestampTz;

use crate::shared::runnable_log;

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

    /// The earlier of the two in the index's order.
    pub(crate) fn earlier(self, other: Place) -> Place {
        if other.index_order() < self.index_order() {
            other
        } else {
            self
        }
    }

    /// The place as the runnable log keeps it.
    pub(crate) fn key(&self) -> runnable_log::Key {
        (self.priority, self.run_after, self.id)
    }
}
