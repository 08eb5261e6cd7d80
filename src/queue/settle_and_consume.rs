//! One commit per job: a consumer settles the jobs it just finished and
//! claims its next ones in one call, so the settle and the claim share a
//! transaction. Hand-written consumers commit twice per job (claim, then
//! settle); committing is what bounds them.

use crate::text::{Text, TextArray};
use pgrx::prelude::*;

use super::consume::{consume_after, route, MAX_BATCH};
use super::payload::Payload;
use super::settle::{complete_many, fail_many, same_length};
use crate::errors::int_in_range;

/// Completes `p_completed` and fails `p_failed` (each in the attempt given
/// beside it, with the error given beside it), as `complete_tasks` and
/// `fail_task` do, then claims up to `p_batch` jobs as `consume_tasks` does.
/// Rows with `outcome` 'claimed' are the new jobs; a row with outcome
/// 'refused' is a job of `p_completed` or `p_failed` that this worker no
/// longer held in that attempt (its lease ran out), left unchanged. Waits
/// up to `p_wait` only when it settled nothing, so settles never wait
/// uncommitted. The last columns are a claimed job's queue and group (0.4.0;
/// 0.3.0's entry point, without them, is in src/compat/v0_3_0.rs).
#[pg_extern(name = "settle_and_consume_tasks")]
#[allow(clippy::too_many_arguments)]
pub(crate) fn settle_and_consume_tasks_with_queue(
    p_batch: Option<i32>,
    p_worker_id: default!(Option<Text>, "NULL"),
    p_completed: default!(Option<Vec<Option<i64>>>, "NULL"),
    p_completed_attempts: default!(Option<Vec<Option<i32>>>, "NULL"),
    p_failed: default!(Option<Vec<Option<i64>>>, "NULL"),
    p_failed_attempts: default!(Option<Vec<Option<i32>>>, "NULL"),
    p_failed_errors: default!(Option<TextArray>, "NULL"),
    p_lease: default!(Option<Interval>, "'5 minutes'"),
    p_wait: default!(Option<Interval>, "NULL"),
    p_queues: default!(Option<TextArray>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(task_id, i64),
        name!(task_name, Option<Text>),
        name!(payload, Option<Payload>),
        name!(attempts, Option<i32>),
        name!(max_attempts, Option<i32>),
        name!(lease_expires_at, Option<TimestampWithTimeZone>),
        name!(priority, Option<i32>),
        name!(worker_id, Text),
        name!(outcome, &'static str),
        name!(queue, Option<Text>),
        name!(group_key, Option<Text>),
    ),
> {
    let batch = int_in_range(p_batch, "p_batch", 1..=MAX_BATCH);
    let completed = p_completed.unwrap_or_default();
    let failed = p_failed.unwrap_or_default();
    let failed_errors = p_failed_errors.map(|TextArray(errors)| errors);
    same_length(&p_completed_attempts, "p_completed_attempts", &completed, "p_completed");
    same_length(&p_failed_attempts, "p_failed_attempts", &failed, "p_failed");
    same_length(&failed_errors, "p_failed_errors", &failed, "p_failed");
    for (ids, name) in [(&completed, "p_completed"), (&failed, "p_failed")] {
        if ids.iter().any(Option::is_none) {
            crate::errors::raise(
                pgrx::PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                format!("{name} must not contain NULL job ids"),
            );
        }
    }
    let route = route(p_queues, &p_wait);

    let mut refused: Vec<(i64, Option<i32>, Text)> = Vec::new();
    let jobs = consume_after(batch, p_worker_id, p_lease, p_wait, route, |client, worker| {
        let mut settled = false;
        if !completed.is_empty() {
            let done = complete_many(client, completed.clone(), worker, p_completed_attempts.clone());
            settled |= !done.is_empty();
            refused.extend(left_out(&completed, &p_completed_attempts, done, worker));
        }
        if !failed.is_empty() {
            let done = fail_many(client, failed.clone(), worker, p_failed_attempts.clone(), failed_errors.clone());
            settled |= !done.is_empty();
            refused.extend(left_out(&failed, &p_failed_attempts, done, worker));
        }
        settled
    });
    let claimed = jobs.into_iter().map(|(id, name, payload, attempts, max_attempts, lease, priority, worker, queue, group)| {
        (id, Some(name), payload, Some(attempts), Some(max_attempts), Some(lease), Some(priority), worker, "claimed", queue, group)
    });
    let refused = refused
        .into_iter()
        .map(|(id, attempt, worker)| (id, None, None, attempt, None, None, None, worker, "refused", None, None));
    TableIterator::new(refused.chain(claimed).collect::<Vec<_>>())
}

/// The jobs of `ids` (with their attempts) that the settle statement left
/// out of `done`: refused.
fn left_out(
    ids: &[Option<i64>],
    attempts: &Option<Vec<Option<i32>>>,
    mut done: Vec<i64>,
    worker: &Text,
) -> Vec<(i64, Option<i32>, Text)> {
    done.sort_unstable();
    ids.iter()
        .enumerate()
        .filter_map(|(i, id)| id.filter(|id| done.binary_search(id).is_err()).map(|id| (id, i)))
        .map(|(id, i)| (id, attempts.as_ref().and_then(|a| a[i]), worker.clone()))
        .collect()
}
