//! Adding jobs.

use crate::text::{self, Text};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use super::payload::{Payload, Payloads};
use crate::errors::{raise, raise_with_hint, required, OrRaise};
use pgrx::datum::DatumWithOid;
use crate::plans::{first_value, plan, types};

/// Queues a job in queue `p_queue`, in group `p_group` when given; returns
/// its id. With `p_unique_key`, when the queue already has an unfinished
/// (pending, failed or processing) job with that key, queues nothing and
/// returns that job's id; with `p_unique_for` too, likewise when a job with
/// that key completed within `p_unique_for` of now.
#[pg_extern(name = "enqueue_task")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn enqueue_task_in_group(
    p_task_name: Option<Text>,
    p_payload: default!(Option<Payload>, "'{}'"),
    p_run_after: default!(Option<TimestampWithTimeZone>, "now()"),
    p_priority: default!(Option<i32>, 0),
    p_max_attempts: default!(Option<i32>, 5),
    p_queue: default!(Option<Text>, "'default'"),
    p_unique_key: default!(Option<Text>, "NULL"),
    p_group: default!(Option<Text>, "NULL"),
    p_unique_for: default!(Option<Interval>, "NULL"),
) -> i64 {
    let queue = text::name(p_queue, "p_queue");
    // Names' limit of 1000 bytes keeps (queue, key) within a btree entry.
    let unique_key = p_unique_key.map(|key| text::checked_name(key, "p_unique_key"));
    let group = p_group.map(|group| text::checked_name(group, "p_group"));
    let unique_for = p_unique_for.map(|window| unique_window(window, unique_key.is_some()));
    enqueue(p_task_name, p_payload, p_run_after, p_priority, p_max_attempts, queue, unique_key, group, unique_for)
}

/// The longest `p_unique_for`: a century of 365.25-day years (36,525 days),
/// longer than any archive is kept, and far from the timestamp range's end.
/// A month counts as a twelfth of such a year, so that '100 years', '1200
/// months' and '36500 days' are all within it, and '101 years' is not.
const LONGEST_UNIQUE_WINDOW_MICROS: i128 = 36_525 * MICROS_PER_DAY;
const MICROS_PER_DAY: i128 = 86_400_000_000;
const MICROS_PER_AVERAGE_MONTH: i128 = 36_525 * MICROS_PER_DAY / 1_200;

/// `p_unique_for`: positive, with no negative part, at most a century,
/// given with a unique key, and only in READ COMMITTED: an older snapshot
/// would not show a completion that committed after it, and the job would
/// be queued twice.
fn unique_window(window: Interval, keyed: bool) -> Interval {
    if !keyed {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("p_unique_for ({window}) needs p_unique_key"),
            "Give the key that identifies the work: p_unique_for says how long a completed job keeps it.",
        );
    }
    let window = crate::errors::forward_interval(Some(window), "p_unique_for");
    let span = window.months() as i128 * MICROS_PER_AVERAGE_MONTH
        + window.days() as i128 * MICROS_PER_DAY
        + window.micros() as i128;
    if span > LONGEST_UNIQUE_WINDOW_MICROS {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
            format!("p_unique_for must be at most 100 years, got {window}"),
            "A window reaches back only as far as the archive of completed jobs is kept (prune_jobs).",
        );
    }
    crate::errors::require_read_committed(
        "p_unique_for is kept only in READ COMMITTED transactions",
        "Enqueue in a READ COMMITTED transaction: a snapshot taken earlier would miss a completion committed since.",
    );
    window
}

/// Queues one job of `p_task_name` in queue `p_queue` (and group `p_group`
/// when given) per element of `p_payloads`, in one statement; returns their
/// ids in the array's order. Without unique keys (enqueue_task takes one).
#[pg_extern(name = "enqueue_tasks")]
pub(crate) fn enqueue_tasks_in_group(
    p_task_name: Option<Text>,
    p_payloads: Option<Payloads>,
    p_run_after: default!(Option<TimestampWithTimeZone>, "now()"),
    p_priority: default!(Option<i32>, 0),
    p_max_attempts: default!(Option<i32>, 5),
    p_queue: default!(Option<Text>, "'default'"),
    p_group: default!(Option<Text>, "NULL"),
) -> SetOfIterator<'static, i64> {
    let queue = text::name(p_queue, "p_queue");
    let group = p_group.map(|group| text::checked_name(group, "p_group"));
    enqueue_many(p_task_name, p_payloads, p_run_after, p_priority, p_max_attempts, queue, group)
}

/// `enqueue_tasks` of every release since 0.3.0: `group` only on 0.4.0's
/// tables (0.3.0's function has no `p_group`).
fn enqueue_many(
    p_task_name: Option<Text>,
    p_payloads: Option<Payloads>,
    p_run_after: Option<TimestampWithTimeZone>,
    p_priority: Option<i32>,
    p_max_attempts: Option<i32>,
    queue: Text,
    group: Option<Text>,
) -> SetOfIterator<'static, i64> {
    let (job, payloads) = NewJob::checked(p_task_name, p_payloads, "p_payloads", p_run_after, p_priority, p_max_attempts);
    job.may_produce(&queue, group.as_ref());
    let ids = crate::access::connect_mut(|client| {
        if payloads.contains_nulls() {
            let stmt = plan(client, include_str!("../../sql/queries/payloads_first_null.sql"), &[types::JSONB_ARRAY]);
            let at = client.select(&*stmt, None, &[payloads.into()]).and_then(first_value::<i64>).or_raise();
            raise(
                PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                format!("p_payloads must not hold NULL, got one at position {}", at.unwrap_or_default()),
            );
        }
        let mut arg_types = NewJob::types(types::JSONB_ARRAY).to_vec();
        let mut values = job.args(payloads.into(), &queue);
        let stmt = if grouped(&group) {
            arg_types.push(types::TEXT);
            values.push(group.as_ref().into());
            plan(client, include_str!("../../sql/queries/queue_enqueue_many.sql"), &arg_types)
        } else {
            plan(client, include_str!("../../sql/queries/queue_enqueue_many_0_3_0.sql"), &arg_types)
        };
        client
            .update(&*stmt, None, &values)
            .and_then(|rows| rows.map(|row| row.get::<i64>(1).map(Option::unwrap_or_default)).collect::<Result<Vec<_>, _>>())
            .or_raise()
    });
    if let Some(first) = ids.iter().min() {
        super::wake::jobs_added(Some(queue.bytes()), ids.len(), job.place(*first));
    }
    SetOfIterator::new(ids)
}

/// `enqueue_task` of every release: `group` and `unique_for` (a window
/// after completion in which a unique key stays held; checked, only with
/// `unique_key`) only on 0.4.0's tables, whose function alone takes them.
#[allow(clippy::too_many_arguments)]
pub(crate) fn enqueue(
    p_task_name: Option<Text>,
    p_payload: Option<Payload>,
    p_run_after: Option<TimestampWithTimeZone>,
    p_priority: Option<i32>,
    p_max_attempts: Option<i32>,
    queue: Text,
    unique_key: Option<Text>,
    group: Option<Text>,
    unique_for: Option<Interval>,
) -> i64 {
    let (job, payload) = NewJob::checked(p_task_name, p_payload, "p_payload", p_run_after, p_priority, p_max_attempts);
    job.may_produce(&queue, group.as_ref());
    let (id, added) = crate::access::connect_mut(|client| {
        let mut values = job.args(payload.into(), &queue);
        let arg_types = NewJob::types(types::JSONB);
        // producer_role, queue and unique_key came with the same update.
        if !crate::version::has_column(c"task_queue", c"producer_role") {
            let stmt = plan(client, include_str!("../../sql/queries/queue_enqueue_0_2_0.sql"), &arg_types[..5]);
            return (inserted_id(client.update(&*stmt, None, &values[..5])), true);
        }
        let grouped = grouped(&group);
        // The statements' arguments after the first seven: the unique key
        // (when given), then the group (on 0.4.0's tables).
        let mut more_types = Vec::new();
        if let Some(key) = &unique_key {
            more_types.push(types::TEXT);
            values.push(key.into());
        }
        if grouped {
            more_types.push(types::TEXT);
            values.push(group.as_ref().into());
        }
        let all_types = [&arg_types[..], &more_types[..]].concat();
        // 0.4.0's statement, or 0.3.0's for tables without group_key.
        let pick = |current: &'static str, v0_3_0: &'static str| if grouped { current } else { v0_3_0 };
        let Some(key) = &unique_key else {
            let sql = pick(
                include_str!("../../sql/queries/queue_enqueue.sql"),
                include_str!("../../sql/queries/queue_enqueue_0_3_0.sql"),
            );
            let stmt = plan(client, sql, &all_types);
            return (inserted_id(client.update(&*stmt, None, &values)), true);
        };
        let sql = pick(
            include_str!("../../sql/queries/queue_enqueue_unique.sql"),
            include_str!("../../sql/queries/queue_enqueue_unique_0_3_0.sql"),
        );
        let insert = plan(client, sql, &all_types);
        let existing_sql = pick(
            include_str!("../../sql/queries/queue_unique_job.sql"),
            include_str!("../../sql/queries/queue_unique_job_0_3_0.sql"),
        );
        let existing = plan(client, existing_sql, &[types::TEXT, types::TEXT]);
        let window = unique_for.map(|window| FinishedHolder::new(client, &queue, key, window));
        // The job that held the key may finish between the two statements
        // (each reads what committed before it): then insert again.
        let unfinished_holder = |client: &mut pgrx::spi::SpiClient<'_>| {
            let found = client.update(&*existing, None, &[(&queue).into(), key.into()]).or_raise();
            (!found.is_empty()).then(|| {
                let row = found.first();
                let id = row.get::<i64>(1).or_raise().unwrap_or_default();
                let name = row.get::<Text>(2).or_raise().unwrap_or_default();
                let holder_group = if grouped { row.get::<Text>(3).or_raise() } else { None };
                job.may_share_key_with(&name, holder_group.as_ref(), &queue, key);
                id
            })
        };
        loop {
            // With a window, the holders are looked for before the insert,
            // the unfinished one first (the work still to be done), so that
            // a merged call writes nothing: no row of its own that others
            // enqueueing the key would wait for until its transaction ends.
            if let Some(window) = &window {
                if let Some(holder) = unfinished_holder(client).or_else(|| window.find(client)) {
                    return (holder, false);
                }
            }
            if let Some(id) = client.update(&*insert, None, &values).and_then(first_value::<i64>).or_raise() {
                // A holder whose completion committed after the look above
                // and before the insert's check: the insert did not wait for
                // it, and the look, in a statement of its own, sees it now.
                // Then the row just inserted goes (rare: others enqueueing
                // the key wait for this transaction meanwhile).
                if let Some(holder) = window.as_ref().and_then(|window| window.find(client)) {
                    let unqueue = plan(client, include_str!("../../sql/queries/queue_unqueue_own.sql"), &[types::INT8]);
                    client.update(&*unqueue, None, &[id.into()]).or_raise();
                    return (holder, false);
                }
                return (id, true);
            }
            if let Some(id) = unfinished_holder(client) {
                return (id, false);
            }
            check_for_interrupts!();
        }
    });
    if added {
        super::wake::jobs_added(Some(queue.bytes()), 1, job.place(id));
    }
    id
}

/// The look for a job completed within `p_unique_for` that holds a unique
/// key: only jobs in the caller's producer scope answer (a completed job
/// holds no index entry, so one the caller could not see is passed over
/// rather than reported: the caller learns nothing of it).
struct FinishedHolder<'a> {
    statement: std::rc::Rc<pgrx::spi::OwnedPreparedStatement>,
    queue: &'a Text,
    key: &'a Text,
    window: Interval,
    scope: Option<Vec<Text>>,
}

impl<'a> FinishedHolder<'a> {
    fn new(client: &pgrx::spi::SpiClient<'_>, queue: &'a Text, key: &'a Text, window: Interval) -> Self {
        let statement = plan(
            client,
            include_str!("../../sql/queries/queue_unique_finished.sql"),
            &[types::TEXT, types::TEXT, types::INTERVAL, types::TEXT_ARRAY],
        );
        let scope = crate::scopes::of_caller(crate::scopes::Capability::Producer).as_parameter();
        FinishedHolder { statement, queue, key, window, scope }
    }

    /// The newest such job's id, read in a statement of its own (with a
    /// snapshot of its own: `update` takes one, `select` would not).
    fn find(&self, client: &mut pgrx::spi::SpiClient<'_>) -> Option<i64> {
        let arguments = [self.queue.into(), self.key.into(), self.window.into(), self.scope.clone().into()];
        client
            .update(&*self.statement, None, &arguments)
            .and_then(first_value::<i64>)
            .or_raise()
    }
}

/// A job's settings, checked, apart from its payload and queue.
struct NewJob {
    task_name: Text,
    run_after: TimestampWithTimeZone,
    priority: i32,
    max_attempts: i32,
}

impl NewJob {
    /// Checks the arguments in their order, the payload (or payloads)
    /// `p_payload`, named `payload_name`, second.
    fn checked<P>(
        p_task_name: Option<Text>,
        p_payload: Option<P>,
        payload_name: &'static str,
        p_run_after: Option<TimestampWithTimeZone>,
        p_priority: Option<i32>,
        p_max_attempts: Option<i32>,
    ) -> (Self, P) {
        let task_name = text::name(p_task_name, "p_task_name");
        let payload = required(p_payload, payload_name);
        let run_after = required(p_run_after, "p_run_after");
        let priority = required(p_priority, "p_priority");
        let max_attempts = crate::errors::int_in_range(p_max_attempts, "p_max_attempts", 1..=i32::MAX);
        (NewJob { task_name, run_after, priority, max_attempts }, payload)
    }

    /// Where job `id` of these settings lies in the claim's index.
    fn place(&self, id: i64) -> super::place::Place {
        super::place::Place { priority: self.priority, run_after: self.run_after.into_inner(), id }
    }

    /// Raises unless the caller's producer scope covers the job's name, its
    /// queue (a scope names queues as it names jobs: issue 44, item 4) and
    /// its group: a tenant cannot put a job in another tenant's group, where
    /// it would count against that group's limits or hold its order.
    fn may_produce(&self, queue: &Text, group: Option<&Text>) {
        crate::scopes::require(crate::scopes::Capability::Producer, "job name", &self.task_name);
        crate::scopes::require(crate::scopes::Capability::Producer, "queue", queue);
        if let Some(group) = group {
            crate::scopes::require(crate::scopes::Capability::Producer, "group", group);
        }
    }

    /// A unique key never answers with a job the caller could not see: when
    /// the job holding the key (unfinished, or completed within the
    /// caller's `p_unique_for`) is outside the caller's producer scope (put
    /// there by an unscoped producer), the enqueue raises 23505 instead of
    /// returning that job's id or dropping the caller's job. A holder in a
    /// group outside the scope is one the caller could not see either.
    fn may_share_key_with(&self, holder_name: &Text, holder_group: Option<&Text>, queue: &Text, key: &Text) {
        let scope = crate::scopes::of_caller(crate::scopes::Capability::Producer);
        let seen = scope.admits(holder_name.bytes()) && holder_group.is_none_or(|group| scope.admits(group.bytes()));
        if !seen {
            crate::errors::raise_with_hint(
                PgSqlErrorCode::ERRCODE_UNIQUE_VIOLATION,
                format!(
                    "queue \"{}\" already has a job with unique key \"{}\", outside the caller's producer scope",
                    queue.shown(),
                    key.shown()
                ),
                "Use a unique key of your own, or a queue no producer outside your scope uses.",
            );
        }
    }

    /// The insert statements' first seven argument types, `payload` the payload's.
    fn types(payload: pgrx::PgOid) -> [pgrx::PgOid; 7] {
        [types::TEXT, payload, types::TIMESTAMPTZ, types::INT4, types::INT4, types::OID, types::TEXT]
    }

    /// The insert statements' first seven arguments.
    fn args<'a>(&'a self, payload: DatumWithOid<'a>, queue: &'a Text) -> Vec<DatumWithOid<'a>> {
        vec![
            (&self.task_name).into(),
            payload,
            self.run_after.into(),
            self.priority.into(),
            self.max_attempts.into(),
            crate::access::caller().into(),
            queue.into(),
        ]
    }
}

/// Whether the insert names the job's group: on 0.4.0's tables, which have
/// the column (older ones are served until ALTER EXTENSION UPDATE, and
/// their functions take no group). A group given where there is no column
/// takes the grouped statement, which then fails with the hint to update.
fn grouped(group: &Option<Text>) -> bool {
    group.is_some() || crate::version::has_column(c"task_queue", c"group_key")
}

fn inserted_id(inserted: pgrx::spi::SpiResult<pgrx::spi::SpiTupleTable<'_>>) -> i64 {
    inserted
        .and_then(first_value::<i64>)
        .or_raise()
        .unwrap_or_else(|| raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "pg_distlock: enqueue returned no id"))
}
