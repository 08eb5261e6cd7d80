//! What an admin does to jobs, one by one, by queue, or all at once: dead
//! jobs (their attempts used up) are retried or deleted; processing jobs are
//! taken back from their consumers; a queue is emptied.

use pgrx::prelude::*;

use crate::errors::OrRaise;
use crate::plans::{plan, types};
use crate::text::{self, Text};

/// Runs `statement` for the jobs of `p_queue` among `p_job_ids` (NULL:
/// any); the queues of the rows it changed, one per row.
fn act_on_jobs(statement: &'static str, p_queue: Option<Text>, p_job_ids: Option<Vec<Option<i64>>>) -> Vec<Text> {
    let queue = p_queue.map(|queue| text::checked_name(queue, "p_queue"));
    if let Some(ids) = &p_job_ids {
        if ids.iter().any(Option::is_none) {
            crate::errors::raise(pgrx::PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED, "p_job_ids must not contain NULL");
        }
    }
    crate::access::connect_mut(|client| {
        let stmt = plan(client, statement, &[types::TEXT, types::INT8_ARRAY]);
        client
            .update(&*stmt, None, &[queue.into(), p_job_ids.into()])
            .and_then(|rows| rows.map(|row| row.get::<Text>(2).map(Option::unwrap_or_default)).collect())
            .or_raise()
    })
}

/// Makes dead jobs of `p_queue` among `p_job_ids` (NULL: any) pending again,
/// runnable now with one more attempt allowed; how many. Waiting consumers
/// of their queues are woken at commit.
#[pg_extern]
fn retry_dead_jobs(p_queue: default!(Option<Text>, "NULL"), p_job_ids: default!(Option<Vec<Option<i64>>>, "NULL")) -> i64 {
    let queues = act_on_jobs(include_str!("../../sql/queries/queue_retry_dead.sql"), p_queue, p_job_ids);
    for queue in &queues {
        // Runnable now, wherever their priority puts them in the index.
        super::wake::jobs_added(Some(queue.bytes()), 1, super::place::Place::HEAD);
    }
    queues.len() as i64
}

/// Deletes dead jobs of `p_queue` among `p_job_ids` (NULL: any); how many.
#[pg_extern]
fn delete_dead_jobs(p_queue: default!(Option<Text>, "NULL"), p_job_ids: default!(Option<Vec<Option<i64>>>, "NULL")) -> i64 {
    let statement = super::for_attempts(
        include_str!("../../sql/queries/queue_delete_dead.sql"),
        include_str!("../../sql/queries/queue_delete_dead_0_3_0.sql"),
    );
    act_on_jobs(statement, p_queue, p_job_ids).len() as i64
}

/// Returns processing jobs of `p_queue` among `p_job_ids` (NULL: any) to the
/// queue, runnable now: for a consumer that will not settle them (dead,
/// hung, or holding a long lease). The attempt it used stays counted (one
/// more is allowed when none is left), and its later complete, fail or
/// extend returns false. Rows being settled right now are skipped; returns
/// how many went back. Waiting consumers of their queues are woken at commit.
#[pg_extern]
fn requeue_jobs(p_queue: default!(Option<Text>, "NULL"), p_job_ids: default!(Option<Vec<Option<i64>>>, "NULL")) -> i64 {
    let queues = act_on_jobs(include_str!("../../sql/queries/queue_requeue.sql"), p_queue, p_job_ids);
    for queue in &queues {
        super::wake::jobs_added(Some(queue.bytes()), 1, super::place::Place::HEAD);
    }
    queues.len() as i64
}

/// Deletes the jobs of queue `p_queue` that wait (pending, failed) or are
/// dead, and with `p_processing` also those being processed (their
/// consumers' later settles find no job: P0002); how many. Rows being settled at
/// that moment are skipped. Unlike `TRUNCATE ... RESTART IDENTITY`, it
/// leaves other queues alone and job ids are never handed out twice.
#[pg_extern]
fn purge_queue(p_queue: Option<Text>, p_processing: default!(Option<bool>, "false")) -> i64 {
    let queue = text::name(p_queue, "p_queue");
    // Claims skip the rows the purge holds; rolled back, it leaves them
    // runnable where claims (their shared frontier too) may have passed.
    super::wake::rows_held_until_end(queue.bytes());
    crate::access::connect_mut(|client| {
        let stmt = plan(client, include_str!("../../sql/queries/queue_purge.sql"), &[types::TEXT, types::BOOL]);
        client.update(&*stmt, None, &[queue.into(), p_processing.unwrap_or(false).into()]).map(|rows| rows.len() as i64).or_raise()
    })
}
