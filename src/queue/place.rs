//! A place in the claim's index: where a claim starts or ended, and where
//! the earliest of the jobs a commit made runnable lies.

use pgrx::pg_sys::TimestampTz;

use crate::shared::runnable_log;

/// A place in the claim's index, whose order (`Ord`: `max` is the later of
/// two, `min` the earlier) is priority descending, then run_after, then id.
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

    /// Its run_after as SQL takes it (the extremes are the infinities).
    pub(crate) fn run_after_timestamp(&self) -> pgrx::datum::TimestampWithTimeZone {
        pgrx::datum::TimestampWithTimeZone::try_from(self.run_after)
            .unwrap_or_else(|_| pgrx::datum::TimestampWithTimeZone::positive_infinity())
    }

    /// The place as the runnable log keeps it.
    pub(crate) fn key(&self) -> runnable_log::Key {
        (self.priority, self.run_after, self.id)
    }
}

impl Ord for Place {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (std::cmp::Reverse(self.priority), self.run_after, self.id).cmp(&(
            std::cmp::Reverse(other.priority),
            other.run_after,
            other.id,
        ))
    }
}

impl PartialOrd for Place {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
