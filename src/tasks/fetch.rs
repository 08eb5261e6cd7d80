//! Workers asking for due tasks.

use crate::text::{self, Text};
use pgrx::datum::TimestampWithTimeZone;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::claim::{claim_for_session, Claim, Mode};
use super::missed::{Budget, Pending, Policy};
use crate::errors::{int_in_range, require_primary, OrRaise};
use crate::plans::{plan, types};

const MAX_TASKS_PER_CALL: i32 = 1000;
/// The LIMIT of sql/queries/due_tasks.sql.
const DUE_TASKS_PAGE: usize = 8;

pub struct Claimed {
    pub task_id: i32,
    pub task_name: Text,
    pub task_type: Text,
    pub fencing_token: i64,
}

/// Claims `task_id` in `mode`, only while it is due, once the slots it
/// missed that its `missed_runs` skips are skipped.
fn claim_due(client: &SpiClient<'_>, task_id: i32, worker: &Text, mode: Mode, pending: &Pending, budget: &mut Budget)
    -> Claim {
    let before = Some((pending, budget));
    match mode {
        Mode::Session => claim_for_session(client, task_id, worker, before),
        Mode::Lease(lease) => super::lease::claim(client, task_id, worker, before, lease),
    }
}

/// One due task of a page of sql/queries/due_tasks.sql.
struct DueTask {
    task_id: i32,
    task_name: Text,
    task_type: Text,
    next_run_at: TimestampWithTimeZone,
    pending: Pending,
}

/// A row of due_tasks.sql; of due_tasks_0_3_0.sql (no missed_runs) when
/// `with_policy` is false.
fn due_task(row: &pgrx::spi::SpiHeapTupleData<'_>, with_policy: bool) -> pgrx::spi::SpiResult<DueTask> {
    let next_run_at = row.get::<TimestampWithTimeZone>(4)?.unwrap_or_else(TimestampWithTimeZone::positive_infinity);
    let (policy, schedule) = if with_policy {
        let policy = Policy::of(row.get::<String>(5)?.as_deref(), row.get(6)?, row.get(7)?);
        let schedule = match (row.get::<String>(8)?, row.get::<String>(9)?) {
            (Some(expression), Some(zone)) => Some((expression, zone)),
            _ => None,
        };
        (policy, schedule)
    } else {
        (Policy::Once, None)
    };
    Ok(DueTask {
        task_id: row.get::<i32>(1)?.unwrap_or_default(),
        task_name: row.get::<Text>(2)?.unwrap_or_default(),
        task_type: row.get::<Text>(3)?.unwrap_or_default(),
        next_run_at,
        pending: Pending { slot: next_run_at.into_inner(), policy, schedule },
    })
}

/// Claims up to `max` due tasks in `mode`, earliest `next_run_at` first,
/// skipping tasks that other claims hold.
fn claim_due_tasks(client: &SpiClient<'_>, worker: &Text, max: usize, mode: Mode) -> Vec<Claimed> {
    let with_policy = crate::version::has_column(c"scheduled_tasks", c"missed_runs");
    let statement = if with_policy {
        include_str!("../../sql/queries/due_tasks.sql")
    } else {
        include_str!("../../sql/queries/due_tasks_0_3_0.sql")
    };
    let stmt = plan(client, statement, &[types::TIMESTAMPTZ, types::INT4]);
    let scope = crate::scopes::of_caller(crate::scopes::Capability::Worker);
    let mut claimed = Vec::new();
    let mut budget = Budget::per_fetch();
    let mut from = (TimestampWithTimeZone::negative_infinity(), i32::MIN);
    loop {
        let page: Vec<DueTask> = client
            .select(&*stmt, None, &[from.0.into(), from.1.into()])
            .and_then(|rows| rows.map(|row| due_task(&row, with_policy)).collect())
            .or_raise();
        let last_page = page.len() < DUE_TASKS_PAGE;
        for DueTask { task_id, task_name, task_type, next_run_at, pending } in page {
            // The next page starts after this slot (at it again only past
            // i32::MAX, where a second look at a task changes nothing).
            from = (next_run_at, task_id.saturating_add(1));
            if !crate::scopes::task_admitted(&scope, &task_name, &task_type) {
                continue;
            }
            if let Claim::Claimed { fencing_token } = claim_due(client, task_id, worker, mode, &pending, &mut budget) {
                claimed.push(Claimed { task_id, task_name, task_type, fencing_token });
                if claimed.len() == max {
                    return claimed;
                }
            }
        }
        if last_page {
            return claimed;
        }
    }
}

/// `(task_id, task_name, task_type, acquired, fencing_token)`: the claimed
/// task, or NULLs and `acquired = false`.
pub(super) type FetchedRow = (Option<i32>, Option<Text>, Option<Text>, bool, Option<i64>);

/// Claims the earliest due task this caller may take, in `mode`.
pub(super) fn claim_first_due(client: &SpiClient<'_>, worker: &Text, mode: Mode) -> FetchedRow {
    match claim_due_tasks(client, worker, 1, mode).pop() {
        Some(c) => (Some(c.task_id), Some(c.task_name), Some(c.task_type), true, Some(c.fencing_token)),
        None => (None, None, None, false, None),
    }
}

fn fetch_one(p_worker_id: Option<Text>, mode: Mode) -> FetchedRow {
    require_primary("claim tasks");
    let worker = text::name(p_worker_id, "p_worker_id");
    crate::access::connect(|client| claim_first_due(client, &worker, mode))
}

/// Claims at most one due, enabled task. Returns that task, or one row of
/// NULLs with `acquired = false` when nothing could be claimed.
#[pg_extern]
fn worker_fetch_and_execute_task(
    p_worker_id: Option<Text>,
) -> TableIterator<
    'static,
    (
        name!(task_id, Option<i32>),
        name!(task_name, Option<Text>),
        name!(task_type, Option<Text>),
        name!(acquired, bool),
        name!(fencing_token, Option<i64>),
    ),
> {
    TableIterator::once(fetch_one(p_worker_id, Mode::Session))
}

/// The same in lease mode: the claim is a lease of `p_lease`, renewed and
/// released by its fencing token.
#[pg_extern(name = "worker_fetch_and_execute_task")]
fn worker_fetch_and_lease_task(
    p_worker_id: Option<Text>,
    p_lease: Option<pgrx::datum::Interval>,
) -> TableIterator<
    'static,
    (
        name!(task_id, Option<i32>),
        name!(task_name, Option<Text>),
        name!(task_type, Option<Text>),
        name!(acquired, bool),
        name!(fencing_token, Option<i64>),
    ),
> {
    let mode = super::lease::mode(p_lease);
    TableIterator::once(fetch_one(p_worker_id, mode))
}

type ClaimedRow = (i32, Text, bool, i64);

fn fetch_many(p_worker_id: Option<Text>, p_max_tasks: Option<i32>, mode: Mode) -> Vec<ClaimedRow> {
    require_primary("claim tasks");
    let worker = text::name(p_worker_id, "p_worker_id");
    let max = int_in_range(p_max_tasks, "p_max_tasks", 1..=MAX_TASKS_PER_CALL);
    crate::access::connect(|client| claim_due_tasks(client, &worker, max as usize, mode))
        .into_iter()
        .map(|c| (c.task_id, c.task_name, true, c.fencing_token))
        .collect()
}

/// Claims up to `p_max_tasks` due tasks (1..1000); returns the claimed ones.
#[pg_extern]
fn try_acquire_multiple_tasks(
    p_worker_id: Option<Text>,
    p_max_tasks: default!(Option<i32>, 3),
) -> TableIterator<
    'static,
    (
        name!(task_id, i32),
        name!(task_name, Text),
        name!(acquired, bool),
        name!(fencing_token, i64),
    ),
> {
    TableIterator::new(fetch_many(p_worker_id, p_max_tasks, Mode::Session))
}

/// The same in lease mode.
#[pg_extern(name = "try_acquire_multiple_tasks")]
fn try_lease_multiple_tasks(
    p_worker_id: Option<Text>,
    p_max_tasks: Option<i32>,
    p_lease: Option<pgrx::datum::Interval>,
) -> TableIterator<
    'static,
    (
        name!(task_id, i32),
        name!(task_name, Text),
        name!(acquired, bool),
        name!(fencing_token, i64),
    ),
> {
    let mode = super::lease::mode(p_lease);
    TableIterator::new(fetch_many(p_worker_id, p_max_tasks, mode))
}
