//! Ending or extending a job's lease. Each succeeds only for the worker that
//! holds the job now: a consumer whose lease expired and whose job went back
//! to the queue (or to another consumer) gets false and changes nothing.
//!
//! A worker id alone cannot tell two attempts of one job apart when the
//! same worker id takes the job again after its lease expired, so each
//! function also has a form that takes the attempt number consume_task
//! returned (`attempts`): it acts only on that attempt.

use crate::text::Text;
use pgrx::prelude::*;

use super::place::Place;
use crate::shared::queue_counters::Outcome;
use super::{for_attempts, for_completions, raise_unknown_job, resolve_worker};
use crate::errors::{required, OrRaise};
use crate::plans::{plan, types};

/// A settled job's queue and its place in the claim's index, when the
/// statement returns them (the head of the index when it does not), and
/// whether a failure made it dead.
type Settled = (Option<Text>, Place, bool);

/// The queue (column 3), place (priority and run_after in columns 4 and
/// 5) and death (column 6, of a failure) of a row a settle statement
/// returned, as far as it returns them.
fn settled_row(row: &pgrx::spi::SpiHeapTupleData<'_>, columns: usize) -> pgrx::spi::SpiResult<Settled> {
    let queue = if columns >= 3 { row.get::<Text>(3)? } else { None };
    let dead = columns >= 6 && row.get::<bool>(6)? == Some(true);
    let place = match (columns >= 5, row.get::<i64>(1)?) {
        (true, Some(id)) => Place {
            priority: row.get::<i32>(4)?.unwrap_or(i32::MAX),
            run_after: row.get::<TimestampWithTimeZone>(5)?.map_or(i64::MIN, |t| t.into_inner()),
            id,
        },
        _ => Place::HEAD,
    };
    Ok((queue, place, dead))
}

/// Runs one of the settle statements for (job, worker, extra, attempt):
/// Some when it changed the job (with the job's queue and place when the
/// statement returns them), None when the caller no longer
/// holds it (or holds a later attempt than `attempt`), ERROR when the job
/// does not exist.
fn settle(
    sql: &'static str,
    job_id: i64,
    p_worker_id: Option<Text>,
    attempt: Option<i32>,
    extra: pgrx::datum::DatumWithOid<'_>,
    extra_type: pgrx::pg_sys::PgOid,
) -> Option<Settled> {
    crate::access::connect(|client| {
        require_job_in_scope(client, job_id);
        let worker = resolve_worker(client, p_worker_id);
        let stmt = plan(client, sql, &[types::INT8, types::TEXT, extra_type, types::INT4]);
        let settled = client
            .select(&*stmt, None, &[job_id.into(), (&worker).into(), extra, attempt.into()])
            .and_then(|mut rows| {
                let columns = rows.columns()?;
                match rows.next() {
                    Some(row) => Ok(Some((row.get::<pgrx::pg_sys::Oid>(2)?, settled_row(&row, columns)?))),
                    None => Ok(None),
                }
            })
            .or_raise();
        if let Some((holder, _)) = &settled {
            crate::access::require_holder(client, *holder, || format!("job {job_id}"));
        } else {
            let exists = for_completions(
                include_str!("../../sql/queries/queue_job_exists.sql"),
                include_str!("../../sql/queries/queue_job_exists_0_2_0.sql"),
            );
            let exists = plan(client, exists, &[types::INT8]);
            let found = client
                .select(&*exists, None, &[job_id.into()])
                .map(|rows| !rows.is_empty())
                .or_raise();
            if !found {
                raise_unknown_job(job_id);
            }
        }
        settled.map(|(_, settled)| settled)
    })
}

/// For a caller whose consumer capability is scoped: a job outside its
/// scope (its name or its queue) is answered exactly as an unknown id (P0002), before anything else
/// is looked at, so that settling cannot tell whether another tenant's job
/// exists. Unscoped callers read nothing here.
fn require_job_in_scope(client: &pgrx::spi::SpiClient<'_>, job_id: i64) {
    let scope = crate::scopes::of_caller(crate::scopes::Capability::Consumer);
    if matches!(*scope, crate::scopes::Scope::Everything) {
        return;
    }
    let statement = for_completions(
        include_str!("../../sql/queries/queue_job_name.sql"),
        include_str!("../../sql/queries/queue_job_name_0_2_0.sql"),
    );
    let stmt = plan(client, statement, &[types::INT8]);
    let rows = client.select(&*stmt, None, &[job_id.into()]).or_raise();
    let admitted = !rows.is_empty() && {
        let row = rows.first();
        let name = row.get::<Text>(1).or_raise().unwrap_or_default();
        let queue = row.get::<Text>(2).or_raise().unwrap_or_default();
        let holder = row.get::<pg_sys::Oid>(3).or_raise();
        in_scope(&scope, &name, &queue, holder)
    };
    if !admitted {
        raise_unknown_job(job_id);
    }
}

/// Whether a scoped consumer may settle a job: its name and its queue are in
/// the scope, or it holds the job already (before 0.4.0 scopes named no
/// queues, so a tenant's consumers took its jobs from the `default` queue:
/// the consumer holding one at the update still settles it).
fn in_scope(scope: &crate::scopes::Scope, name: &Text, queue: &Text, holder: Option<pg_sys::Oid>) -> bool {
    scope.admits(name.bytes()) && (scope.admits(queue.bytes()) || holder == Some(crate::access::caller()))
}

/// For a caller whose consumer capability is scoped: `ids` with every job
/// outside its scope replaced by NULL, which the batch settle statements
/// leave out exactly as an unknown id (no 42501 naming the holder, no row).
fn ids_in_scope(client: &pgrx::spi::SpiClient<'_>, ids: Vec<Option<i64>>) -> Vec<Option<i64>> {
    let scope = crate::scopes::of_caller(crate::scopes::Capability::Consumer);
    if matches!(*scope, crate::scopes::Scope::Everything) {
        return ids;
    }
    let stmt = plan(client, include_str!("../../sql/queries/queue_unfinished_names.sql"), &[types::INT8_ARRAY]);
    let admitted: std::collections::HashSet<i64> = client
        .select(&*stmt, None, &[ids.clone().into()])
        .and_then(|rows| {
            rows.map(|row| {
                Ok((
                    row.get::<i64>(1)?.unwrap_or_default(),
                    row.get::<Text>(2)?.unwrap_or_default(),
                    row.get::<Text>(3)?.unwrap_or_default(),
                    row.get::<pg_sys::Oid>(4)?,
                ))
            })
            .collect::<pgrx::spi::SpiResult<Vec<_>>>()
        })
        .or_raise()
        .into_iter()
        .filter(|(_, name, queue, holder)| in_scope(&scope, name, queue, *holder))
        .map(|(id, _, _, _)| id)
        .collect();
    ids.into_iter().map(|id| id.filter(|id| admitted.contains(id))).collect()
}

fn complete(p_task_id: Option<i64>, p_worker_id: Option<Text>, attempt: Option<i32>) -> bool {
    let job_id = required(p_task_id, "p_task_id");
    // The statement takes no extra value; pass a typed NULL to keep one shape.
    settle(
        for_attempts(
            include_str!("../../sql/queries/queue_complete.sql"),
            for_completions(
                include_str!("../../sql/queries/queue_complete_0_3_0.sql"),
                include_str!("../../sql/queries/queue_complete_0_2_0.sql"),
            ),
        ),
        job_id,
        p_worker_id,
        attempt,
        pgrx::datum::DatumWithOid::null::<bool>(),
        types::BOOL,
    )
    .inspect(|settled| count_settled(settled, Outcome::Completed))
    .is_some()
}

/// Notes a settled job for the queue counters: `outcome`, or dead for a
/// failure that used the job's last attempt.
fn count_settled((queue, _, dead): &Settled, outcome: Outcome) {
    if let Some(queue) = queue {
        super::counters::note(queue.bytes(), if *dead { Outcome::Dead } else { outcome }, None);
    }
}

fn fail(p_task_id: Option<i64>, p_error: Option<Text>, p_worker_id: Option<Text>, attempt: Option<i32>) -> bool {
    let job_id = required(p_task_id, "p_task_id");
    // The queue came with the update that made queue_fail.sql return it.
    let statement = match crate::version::has_column(c"task_queue", c"queue") {
        true => super::for_attempts(
            include_str!("../../sql/queries/queue_fail.sql"),
            include_str!("../../sql/queries/queue_fail_0_3_0.sql"),
        ),
        false => include_str!("../../sql/queries/queue_fail_0_2_0.sql"),
    };
    let failed = settle(statement, job_id, p_worker_id, attempt, p_error.into(), types::TEXT);
    if let Some(settled @ (queue, place, _)) = &failed {
        count_settled(settled, Outcome::Failed);
        // Its retry time is new to consumers waiting for the next job.
        super::wake::jobs_added(queue.as_ref().map(Text::bytes), 1, *place);
    }
    failed.is_some()
}

fn extend(p_task_id: Option<i64>, p_lease: Option<Interval>, p_worker_id: Option<Text>, attempt: Option<i32>) -> bool {
    let job_id = required(p_task_id, "p_task_id");
    let lease = super::job_lease(p_lease);
    settle(include_str!("../../sql/queries/queue_extend.sql"), job_id, p_worker_id, attempt, lease.into(), types::INTERVAL)
        .is_some()
}

/// Marks this worker's job completed.
#[pg_extern]
fn complete_task(p_task_id: Option<i64>, p_worker_id: default!(Option<Text>, "NULL")) -> bool {
    complete(p_task_id, p_worker_id, None)
}

/// Marks attempt `p_attempt` of this worker's job completed.
#[pg_extern(name = "complete_task")]
fn complete_attempt(p_task_id: Option<i64>, p_worker_id: Option<Text>, p_attempt: Option<i32>) -> bool {
    complete(p_task_id, p_worker_id, Some(required(p_attempt, "p_attempt")))
}

/// Records a failed attempt: retried after exponential backoff with jitter,
/// or dead once its attempts are used up.
#[pg_extern]
fn fail_task(
    p_task_id: Option<i64>,
    p_error: default!(Option<Text>, "NULL"),
    p_worker_id: default!(Option<Text>, "NULL"),
) -> bool {
    fail(p_task_id, p_error, p_worker_id, None)
}

/// Records that attempt `p_attempt` of this worker's job failed.
#[pg_extern(name = "fail_task")]
fn fail_attempt(
    p_task_id: Option<i64>,
    p_error: Option<Text>,
    p_worker_id: Option<Text>,
    p_attempt: Option<i32>,
) -> bool {
    fail(p_task_id, p_error, p_worker_id, Some(required(p_attempt, "p_attempt")))
}

/// Extends this worker's lease on a job to `p_lease` from now.
#[pg_extern]
fn extend_task_lease(
    p_task_id: Option<i64>,
    p_lease: Option<Interval>,
    p_worker_id: default!(Option<Text>, "NULL"),
) -> bool {
    extend(p_task_id, p_lease, p_worker_id, None)
}

/// Extends the lease of attempt `p_attempt` of this worker's job.
#[pg_extern(name = "extend_task_lease")]
fn extend_attempt_lease(
    p_task_id: Option<i64>,
    p_lease: Option<Interval>,
    p_worker_id: Option<Text>,
    p_attempt: Option<i32>,
) -> bool {
    extend(p_task_id, p_lease, p_worker_id, Some(required(p_attempt, "p_attempt")))
}

/// Marks every job in `p_task_ids` that this worker holds completed (when
/// `p_attempts` is given, job `p_task_ids[i]` only in attempt
/// `p_attempts[i]`); returns the ids it completed. Jobs the worker no longer
/// holds, and unknown ids, are left out rather than raising, so that one
/// lost lease does not undo a whole batch.
#[pg_extern]
fn complete_tasks(
    p_task_ids: Option<Vec<Option<i64>>>,
    p_worker_id: default!(Option<Text>, "NULL"),
    p_attempts: default!(Option<Vec<Option<i32>>>, "NULL"),
) -> SetOfIterator<'static, i64> {
    let ids = required(p_task_ids, "p_task_ids");
    same_length(&p_attempts, "p_attempts", &ids, "p_task_ids");
    let completed = crate::access::connect(|client| {
        let worker = resolve_worker(client, p_worker_id);
        complete_many(client, ids, &worker, p_attempts)
    });
    SetOfIterator::new(completed)
}

/// Raises 22023 unless `array` (when given) has as many elements as `ids`.
pub(crate) fn same_length<T>(array: &Option<Vec<T>>, name: &str, ids: &[Option<i64>], ids_name: &str) {
    if let Some(array) = array {
        if array.len() != ids.len() {
            crate::errors::raise(
                pgrx::PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("{name} has {} elements but {ids_name} has {}", array.len(), ids.len()),
            );
        }
    }
}

/// Completes the jobs `ids` that `worker` holds (job `ids[i]` only in
/// attempt `attempts[i]` when given); the ids it completed.
pub(crate) fn complete_many(
    client: &pgrx::spi::SpiClient<'_>,
    ids: Vec<Option<i64>>,
    worker: &Text,
    attempts: Option<Vec<Option<i32>>>,
) -> Vec<i64> {
    let stmt = plan(
        client,
        for_attempts(
            include_str!("../../sql/queries/queue_complete_many.sql"),
            for_completions(
                include_str!("../../sql/queries/queue_complete_many_0_3_0.sql"),
                include_str!("../../sql/queries/queue_complete_many_0_2_0.sql"),
            ),
        ),
        &[types::INT8_ARRAY, types::TEXT, types::INT4_ARRAY],
    );
    let ids = ids_in_scope(client, ids);
    let rows = client.select(&*stmt, None, &[ids.into(), worker.into(), attempts.into()]);
    let completed = settled_ids(client, rows, worker);
    for (_, settled) in &completed {
        count_settled(settled, Outcome::Completed);
    }
    completed.into_iter().map(|(id, _)| id).collect()
}

/// Records failed attempts of the jobs `ids` that `worker` holds (job
/// `ids[i]` only in attempt `attempts[i]` when given, with error
/// `errors[i]`); the ids it failed. Wakes waiting consumers for their retries.
pub(crate) fn fail_many(
    client: &pgrx::spi::SpiClient<'_>,
    ids: Vec<Option<i64>>,
    worker: &Text,
    attempts: Option<Vec<Option<i32>>>,
    errors: Option<Vec<Option<Text>>>,
) -> Vec<i64> {
    let stmt = plan(
        client,
        super::for_attempts(
            include_str!("../../sql/queries/queue_fail_many.sql"),
            include_str!("../../sql/queries/queue_fail_many_0_3_0.sql"),
        ),
        &[types::INT8_ARRAY, types::TEXT, types::INT4_ARRAY, types::TEXT_ARRAY],
    );
    let ids = ids_in_scope(client, ids);
    let rows = client.select(&*stmt, None, &[ids.into(), worker.into(), attempts.into(), errors.into()]);
    let failed = settled_ids(client, rows, worker);
    for (_, settled @ (queue, place, _)) in &failed {
        count_settled(settled, Outcome::Failed);
        super::wake::jobs_added(queue.as_ref().map(Text::bytes), 1, *place);
    }
    failed.into_iter().map(|(id, _)| id).collect()
}

/// The (id, queue) pairs a settle statement returned (the queue when it
/// returns one), once the caller may act for every role that held them.
fn settled_ids(
    client: &pgrx::spi::SpiClient<'_>,
    rows: pgrx::spi::SpiResult<pgrx::spi::SpiTupleTable<'_>>,
    worker: &Text,
) -> Vec<(i64, Settled)> {
    let rows: Vec<(i64, Option<pgrx::pg_sys::Oid>, Settled)> = rows
        .and_then(|rows| {
            let columns = rows.columns()?;
            rows.map(|row| {
                Ok((row.get::<i64>(1)?.unwrap_or_default(), row.get::<pgrx::pg_sys::Oid>(2)?, settled_row(&row, columns)?))
            })
            .collect()
        })
        .or_raise();
    let mut holders: Vec<pgrx::pg_sys::Oid> = rows.iter().filter_map(|(_, holder, _)| *holder).collect();
    holders.sort_unstable_by_key(|oid| oid.to_u32());
    holders.dedup();
    for holder in holders {
        crate::access::require_holder(client, Some(holder), || format!("jobs of worker \"{worker}\""));
    }
    rows.into_iter().map(|(id, _, settled)| (id, settled)).collect()
}
