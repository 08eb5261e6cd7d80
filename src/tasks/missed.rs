//! Slots a task missed while no worker claimed it (`missed_runs`), and what
//! a fetch skips of them before it claims (docs/tasks.md, "Missed runs"):
//! - `once`: nothing; the run serves them all, and the next slot is the
//!   first after it ends (finish_claim.sql).
//! - `skip`: slots older than `missed_runs_grace` are skipped; the task moves
//!   to its first slot within the grace (due at once) or, with none, to its
//!   next one.
//! - `all`: each slot runs in turn (finish_claim.sql schedules the slot after
//!   the one a run served); when more than `missed_runs_max` are due, the
//!   older ones are skipped.
//!
//! A skipped slot is logged with status `skipped` and its `scheduled_for`.

use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use crate::errors::{interval_micros, OrRaise};
use crate::plans::{plan, types};
use crate::text::Text;

/// Skipped slots logged one by one per fetch, the oldest of each task; the
/// last row of a task says how many more (a per-second schedule misses
/// 86,400 in a day).
const LOGGED_MAX: usize = 1000;
/// Slots of one task stepped through one by one, to count them and to find
/// the newest `missed_runs_max`; past it the newest are found by bisection
/// and the count is a lower bound.
const STEPS_MAX: usize = 10_000;
/// Bisection probes at most: the bisection ends at a second (no two slots
/// of a schedule are closer), and the seconds from year 1 to 2100 are
/// fewer than 2^37.
const PROBES_MAX: usize = 40;
/// Slots one fetch steps through at most, over all the tasks it skips for:
/// the first task always fits (STEPS_MAX + (PROBES_MAX + 2) * 1001 + 4), and a task
/// that does not fit what is left is passed over for a later fetch. A fetch
/// holds each skipped task's row until it commits (about 4 us a step, so
/// 0.25 s at most; review helper-85 timed 2 s fetches at 20 us a step and
/// twice the bound).
const FETCH_STEPS_MAX: usize = 60_000;
/// The earliest slot a schedule is stepped from: cron_next refuses a start
/// whose wall clock is before year 1 in the zone (a slot set by hand to
/// '-infinity' is not a slot of the schedule, see `plan_skip`).
const EARLIEST_STEP: i64 = -63_082_281_600_000_000 + 3 * 86_400_000_000;

/// What one fetch may still spend on skipping missed slots.
#[derive(Debug)]
pub struct Budget {
    steps: usize,
    logged: usize,
}

impl Budget {
    pub fn per_fetch() -> Budget {
        Budget { steps: FETCH_STEPS_MAX, logged: LOGGED_MAX }
    }
}

/// What a fetch does with a due task before its claim.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// Claim its due slot.
    Run,
    Skip(Skip),
    /// Pass it over: this fetch cannot afford the skip; a later one will.
    Later,
}

/// A task's `missed_runs` with its grace or maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Once,
    /// Slots older than this many microseconds are skipped.
    Skip { grace: i64 },
    /// At most this many of the due slots run, the newest.
    All { max: Option<usize> },
}

impl Policy {
    /// From the task row's columns; an unknown value (a database edited
    /// around the trigger) is `once`, today's behaviour.
    pub fn of(missed_runs: Option<&str>, grace: Option<Interval>, max: Option<i32>) -> Policy {
        match missed_runs {
            Some("skip") => Policy::Skip {
                grace: grace.map(|g| interval_micros(&g).clamp(0, i64::MAX as i128) as i64).unwrap_or(0),
            },
            Some("all") => Policy::All { max: max.filter(|m| *m > 0).map(|m| m as usize) },
            _ => Policy::Once,
        }
    }
}

/// A due task as a fetch read it, with what it needs to skip missed slots.
pub struct Pending {
    /// Its due slot (`next_run_at`), in PostgreSQL's microseconds.
    pub slot: i64,
    pub policy: Policy,
    /// Its cron expression and the zone it follows; None without a cron.
    pub schedule: Option<(String, String)>,
}

/// What a fetch skips: the slots before `kept`, which becomes the task's
/// due slot (None: no slot is left, for a task without a cron).
#[derive(Debug, PartialEq, Eq)]
pub struct Skip {
    pub kept: Option<i64>,
    /// The oldest skipped slots, at most LOGGED_MAX.
    pub logged: Vec<i64>,
    /// How many were skipped (at least this many when `exact` is false).
    pub total: i64,
    pub exact: bool,
}

/// What a fetch does with a task whose due slot is `slot`, at `now`, under
/// `policy`, within `budget`; `next(t)` is its first slot strictly after `t`
/// (None without one). Only a slot of the schedule is ever skipped: a due
/// time the schedule did not make (run_task_now's, a retry's, one set by
/// hand) runs however late.
pub fn plan_skip(
    policy: Policy,
    slot: i64,
    now: i64,
    budget: &mut Budget,
    mut next: impl FnMut(i64) -> Option<i64>,
) -> Plan {
    let worst = match policy {
        Policy::Once | Policy::All { max: None } => return Plan::Run,
        Policy::Skip { grace } if slot >= now.saturating_sub(grace) => return Plan::Run,
        Policy::Skip { .. } => STEPS_MAX + 4,
        Policy::All { max: Some(max) } => STEPS_MAX + (PROBES_MAX + 2) * (max + 1) + 4,
    };
    let mut steps = 0;
    let mut next = |after: i64| {
        steps += 1;
        next(after.max(EARLIEST_STEP))
    };
    if slot < EARLIEST_STEP || next(slot - 1) != Some(slot) {
        return Plan::Run;
    }
    if budget.steps < worst || budget.logged == 0 {
        return Plan::Later;
    }
    let log_max = budget.logged;
    let planned = match policy {
        Policy::Skip { grace } => Some(plan_late(grace, slot, now, log_max, &mut next)),
        Policy::All { max: Some(max) } => plan_newest(max, slot, now, log_max, &mut next),
        _ => None,
    };
    budget.steps = budget.steps.saturating_sub(steps);
    match planned {
        Some(skip) => {
            budget.logged -= skip.logged.len().min(budget.logged);
            Plan::Skip(skip)
        }
        None => Plan::Run,
    }
}

/// `skip`: the slots older than `grace` at `now`, from `slot` on.
fn plan_late(grace: i64, slot: i64, now: i64, log_max: usize, next: &mut impl FnMut(i64) -> Option<i64>) -> Skip {
    let oldest_kept = now.saturating_sub(grace);
    let kept = next(oldest_kept.saturating_sub(1));
    let mut skip = Skip { kept, logged: Vec::new(), total: 0, exact: true };
    skip.note(slot, log_max);
    let mut at = slot;
    while let Some(later) = next(at).filter(|later| kept.is_some_and(|kept| *later < kept)) {
        if skip.total as usize >= STEPS_MAX {
            skip.exact = false;
            break;
        }
        skip.note(later, log_max);
        at = later;
    }
    skip
}

impl Skip {
    fn note(&mut self, slot: i64, log_max: usize) {
        if self.logged.len() < log_max {
            self.logged.push(slot);
        }
        self.total += 1;
    }
}

/// `all` with a maximum: the due slots from `slot` to `now` are stepped
/// through; when more than `max` are due, all but the newest `max` are
/// skipped.
fn plan_newest(
    max: usize,
    slot: i64,
    now: i64,
    log_max: usize,
    next: &mut impl FnMut(i64) -> Option<i64>,
) -> Option<Skip> {
    // The newest `max` slots stepped through, oldest first.
    let mut newest = std::collections::VecDeque::with_capacity(max + 1);
    let mut skip = Skip { kept: None, logged: Vec::new(), total: 0, exact: true };
    let mut at = Some(slot);
    let mut steps = 0;
    while let Some(due) = at.filter(|due| *due <= now) {
        newest.push_back(due);
        if newest.len() > max {
            let older = newest.pop_front().unwrap_or(due);
            skip.note(older, log_max);
        }
        steps += 1;
        if steps >= STEPS_MAX {
            break;
        }
        at = next(due);
    }
    let last = *newest.back()?;
    let unread = if steps >= STEPS_MAX { count_due_after(last, now, max, next) } else { 0 };
    if unread < max {
        // The newest `max` lie among those read and the `unread` after them.
        let from_read = max - unread;
        if newest.len() < from_read {
            return None;
        }
        while newest.len() > from_read {
            if let Some(older) = newest.pop_front() {
                skip.note(older, log_max);
            }
        }
        if skip.total == 0 {
            return None;
        }
        skip.kept = newest.front().copied();
        return Some(skip);
    }
    // More than `max` lie after those read: every slot read is skipped, and
    // the newest `max` begin after the latest point with `max` slots due
    // after it, found by bisection (each probe counts at most `max`).
    for older in newest.drain(..) {
        skip.note(older, log_max);
    }
    skip.exact = false;
    // Slots are at least a second apart: within a second of each other,
    // `low` has exactly `max` slots after it, the first of them next(low).
    let (mut low, mut high) = (last, now);
    while high - low > 1_000_000 {
        let middle = low + (high - low) / 2;
        if count_due_after(middle, now, max, next) >= max {
            low = middle;
        } else {
            high = middle;
        }
    }
    skip.kept = next(low);
    Some(skip)
}

/// How many slots lie in (`after`, `now`], counting up to `cap`.
fn count_due_after(after: i64, now: i64, cap: usize, next: &mut impl FnMut(i64) -> Option<i64>) -> usize {
    let mut count = 0;
    let mut at = after;
    while count < cap {
        match next(at) {
            Some(due) if due <= now => {
                count += 1;
                at = due;
            }
            _ => break,
        }
    }
    count
}

/// Whether the claim after `skip_missed` may go on.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Claim,
    /// Pass the task over: another transaction holds its row (a skip it has
    /// not committed: its claim would wait for it), or this fetch cannot
    /// afford its skip.
    PassOver,
}

/// Skips the missed slots of task `task_id` that `pending` calls for, under
/// the task's lock (taken by the caller), before the claim: the claim that
/// follows then takes the kept slot if it is due. Skips nothing when the
/// task's due slot is no longer the one the fetch read.
pub fn skip_missed(client: &SpiClient<'_>, task_id: i32, pending: &Pending, budget: &mut Budget, worker: &Text)
    -> Outcome {
    if pending.policy == Policy::Once {
        return Outcome::Claim;
    }
    let now = unsafe { pg_sys::GetCurrentTimestamp() };
    let schedule = pending
        .schedule
        .as_ref()
        .map(|(expression, zone)| crate::schedule::ZonedSchedule::new(expression, zone, "schedule_timezone"));
    let next = |after: i64| -> Option<i64> {
        let after = TimestampWithTimeZone::try_from(after).ok()?;
        Some(schedule.as_ref()?.next_after(after).into_inner())
    };
    let skip = match plan_skip(pending.policy, pending.slot, now, budget, next) {
        Plan::Run => return Outcome::Claim,
        Plan::Later => return Outcome::PassOver,
        Plan::Skip(skip) => skip,
    };
    let reason = match pending.policy {
        Policy::Skip { .. } => "missed: older than missed_runs_grace when a worker fetched it",
        _ => "missed: more than missed_runs_max slots were due when a worker fetched them",
    };
    let stamp = |micros: i64| TimestampWithTimeZone::try_from(micros).ok();
    let logged: Vec<Option<TimestampWithTimeZone>> = skip.logged.iter().map(|slot| stamp(*slot)).collect();
    let reason = if skip.exact { reason.to_string() } else { format!("{reason} (counted up to {STEPS_MAX} slots)") };
    let stmt = plan(
        client,
        include_str!("../../sql/queries/skip_missed_slots.sql"),
        &[
            types::INT4,
            types::TIMESTAMPTZ,
            types::TIMESTAMPTZ,
            types::TIMESTAMPTZ_ARRAY,
            types::INT8,
            types::TEXT,
            types::TEXT,
            types::OID,
        ],
    );
    let row_free = client
        .select(
            &*stmt,
            None,
            &[
                task_id.into(),
                stamp(pending.slot).into(),
                skip.kept.and_then(stamp).into(),
                logged.into(),
                skip.total.into(),
                reason.as_str().into(),
                worker.into(),
                crate::access::caller().into(),
            ],
        )
        .and_then(|rows| rows.first().get_one::<bool>())
        .or_raise();
    if row_free == Some(true) {
        Outcome::Claim
    } else {
        Outcome::PassOver
    }
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    /// Slots every `period` from 0.
    fn every(period: i64) -> impl FnMut(i64) -> Option<i64> {
        move |after| Some((after.div_euclid(period) + 1) * period)
    }

    fn plan(policy: Policy, slot: i64, now: i64, next: impl FnMut(i64) -> Option<i64>) -> Option<Skip> {
        match plan_skip(policy, slot, now, &mut Budget::per_fetch(), next) {
            Plan::Skip(skip) => Some(skip),
            Plan::Run => None,
            Plan::Later => panic!("a fresh budget passes nothing over"),
        }
    }

    #[test]
    fn once_and_all_without_a_maximum_skip_nothing() {
        assert_eq!(plan(Policy::Once, 0, 1_000, every(10)), None);
        assert_eq!(plan(Policy::All { max: None }, 0, 1_000, every(10)), None);
    }

    #[test]
    fn a_due_time_the_schedule_did_not_make_runs_however_late() {
        // run_task_now's, a retry's, one set by hand (even -infinity).
        assert_eq!(plan(Policy::Skip { grace: 5 }, 903, 1_000, every(10)), None);
        assert_eq!(plan(Policy::All { max: Some(1) }, 903, 1_000, every(10)), None);
        assert_eq!(plan(Policy::Skip { grace: 5 }, i64::MIN, 1_000, every(10)), None);
        // Without a cron, no slot is the schedule's.
        assert_eq!(plan(Policy::Skip { grace: 5 }, 900, 1_000, |_| None), None);
    }

    #[test]
    fn a_fetch_spends_one_budget_over_its_tasks() {
        let mut budget = Budget::per_fetch();
        let mut skipped = 0;
        let mut later = 0;
        for _ in 0..10 {
            match plan_skip(Policy::Skip { grace: 0 }, 0, 10 * 1_000_000, &mut budget, every(10)) {
                Plan::Skip(skip) => skipped += skip.logged.len(),
                Plan::Later => later += 1,
                Plan::Run => panic!("a stale slot of the schedule"),
            }
        }
        assert_eq!(skipped, LOGGED_MAX, "at most LOGGED_MAX rows a fetch");
        assert!(later >= 5, "tasks past the budget wait for a later fetch: {later}");
    }

    #[test]
    fn skip_keeps_a_slot_within_the_grace() {
        assert_eq!(plan(Policy::Skip { grace: 50 }, 960, 1_000, every(10)), None);
        let skip = plan(Policy::Skip { grace: 35 }, 900, 1_000, every(10)).expect("a skip");
        assert_eq!(skip, Skip { kept: Some(970), logged: vec![900, 910, 920, 930, 940, 950, 960], total: 7, exact: true });
        // With every slot older than the grace, the next one after now.
        let skip = plan(Policy::Skip { grace: 0 }, 990, 1_005, every(10)).expect("a skip");
        assert_eq!(skip.kept, Some(1_010));
        assert_eq!(skip.logged, vec![990, 1_000]);
    }

    #[test]
    fn skip_logs_the_oldest_and_counts_up_to_the_step_bound() {
        let skip = plan(Policy::Skip { grace: 0 }, 0, 5_000_000, every(10)).expect("a skip");
        // The slot at the grace's very edge is within it.
        assert_eq!(skip.kept, Some(5_000_000));
        assert_eq!(skip.logged.len(), LOGGED_MAX);
        assert_eq!(skip.logged[..3], [0, 10, 20]);
        assert_eq!((skip.total, skip.exact), (STEPS_MAX as i64, false));
    }

    #[test]
    fn all_keeps_the_newest_maximum() {
        assert_eq!(plan(Policy::All { max: Some(3) }, 980, 1_000, every(10)), None);
        let skip = plan(Policy::All { max: Some(3) }, 950, 1_000, every(10)).expect("a skip");
        assert_eq!(skip, Skip { kept: Some(980), logged: vec![950, 960, 970], total: 3, exact: true });
    }

    #[test]
    fn all_finds_the_newest_past_the_step_bound() {
        // Slots every 10 s, in microseconds as the server's.
        let period = 10_000_000;
        for (max, late) in [(1, 3), (7, 3), (600, 3), (1000, 9_999_999), (2, 0)] {
            let now = period * (STEPS_MAX as i64 + 5_000) + late;
            let skip = plan(Policy::All { max: Some(max) }, 0, now, every(period)).expect("a skip");
            let newest = (now / period) * period;
            assert_eq!(skip.kept, Some(newest - period * (max as i64 - 1)), "max {max}");
            assert_eq!(skip.logged.len(), LOGGED_MAX);
        }
        // Fewer than the maximum after the bound: the count is exact.
        let now = 10 * (STEPS_MAX as i64 + 2);
        let skip = plan(Policy::All { max: Some(10) }, 0, now, every(10)).expect("a skip");
        assert_eq!(skip.kept, Some(now - 90));
        assert!(skip.exact);
        assert_eq!(skip.total, STEPS_MAX as i64 + 3 - 10);
    }
}
