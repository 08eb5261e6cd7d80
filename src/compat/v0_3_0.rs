//! 0.3.0's `consume_task`, `consume_tasks` and `settle_and_consume_tasks`:
//! the symbols `consume_task_from_queues_wrapper`,
//! `consume_tasks_from_queues_wrapper` and `settle_and_consume_tasks_wrapper`,
//! with 0.3.0's result columns (without the job's queue and group, which
//! 0.4.0 added as the last columns). A C function must return exactly the columns its
//! SQL declares, so 0.4.0's functions are other symbols. Likewise 0.3.0's
//! `enqueue_task` and `enqueue_tasks` (`enqueue_task_in_queue_wrapper`,
//! `enqueue_tasks_wrapper`), which take no group: a C function reads the
//! arguments its SQL passes, and 0.4.0's take one more.
//!
//! The update to 0.4.0 renames 0.3.0's five to `*_0_3_0` rather than
//! dropping them, so that calls waiting in them when it commits end as they
//! began (a dropped function's call fails building its result row). Renamed,
//! they refuse new calls: their grants are whatever the DBA granted on 0.3.0's
//! functions, which revoke_capability no longer reaches.

use std::ffi::CStr;

use pgrx::pg_sys;
use pgrx::prelude::*;

use crate::errors::{int_in_range, raise_with_hint};
use crate::queue::{
    consume, enqueue_task_in_group, enqueue_tasks_in_group, route, settle_and_consume_tasks_with_queue, without_queue,
    Payload, Payloads, MAX_BATCH,
};
use crate::text::{Text, TextArray};

/// Refuses a new call of one of these symbols through its renamed function.
fn refuse_if_renamed(fcinfo: pg_sys::FunctionCallInfo) {
    // SAFETY: PostgreSQL calls a function with a valid fcinfo and flinfo;
    // get_func_name returns a palloc'd name or NULL.
    let name = unsafe {
        let name = pg_sys::get_func_name((*(*fcinfo).flinfo).fn_oid);
        if name.is_null() {
            return;
        }
        CStr::from_ptr(name).to_string_lossy().into_owned()
    };
    if let Some(current) = name.strip_suffix("_0_3_0") {
        raise_with_hint(
            PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
            format!("distlock.{name} is 0.3.0's {current}, kept by the update to 0.4.0 only for calls running when it committed"),
            &format!("Call distlock.{current}, 0.4.0's {}.", if current.starts_with("enqueue") {
                "function of that name, which also takes a group"
            } else {
                "function of that name, which also returns each job's queue and group"
            }),
        );
    }
}

#[pg_extern(sql = false)]
#[allow(clippy::too_many_arguments)]
fn enqueue_task_in_queue(
    p_task_name: Option<Text>,
    p_payload: Option<Payload>,
    p_run_after: Option<TimestampWithTimeZone>,
    p_priority: Option<i32>,
    p_max_attempts: Option<i32>,
    p_queue: Option<Text>,
    p_unique_key: Option<Text>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> i64 {
    refuse_if_renamed(fcinfo);
    enqueue_task_in_group(p_task_name, p_payload, p_run_after, p_priority, p_max_attempts, p_queue, p_unique_key, None, None)
}

#[pg_extern(sql = false)]
fn enqueue_tasks(
    p_task_name: Option<Text>,
    p_payloads: Option<Payloads>,
    p_run_after: Option<TimestampWithTimeZone>,
    p_priority: Option<i32>,
    p_max_attempts: Option<i32>,
    p_queue: Option<Text>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> SetOfIterator<'static, i64> {
    refuse_if_renamed(fcinfo);
    enqueue_tasks_in_group(p_task_name, p_payloads, p_run_after, p_priority, p_max_attempts, p_queue, None)
}

#[pg_extern(sql = false)]
fn consume_task_from_queues(
    p_worker_id: Option<Text>,
    p_lease: Option<Interval>,
    p_wait: Option<Interval>,
    p_queues: Option<TextArray>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> TableIterator<'static, (i64, Text, Option<Payload>, i32, i32, TimestampWithTimeZone, i32, Text)> {
    refuse_if_renamed(fcinfo);
    let route = route(p_queues, &p_wait);
    TableIterator::new(without_queue(consume(1, p_worker_id, p_lease, p_wait, route)))
}

#[pg_extern(sql = false)]
fn consume_tasks_from_queues(
    p_batch: Option<i32>,
    p_worker_id: Option<Text>,
    p_lease: Option<Interval>,
    p_wait: Option<Interval>,
    p_queues: Option<TextArray>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> TableIterator<'static, (i64, Text, Option<Payload>, i32, i32, TimestampWithTimeZone, i32, Text)> {
    refuse_if_renamed(fcinfo);
    let batch = int_in_range(p_batch, "p_batch", 1..=MAX_BATCH);
    let route = route(p_queues, &p_wait);
    TableIterator::new(without_queue(consume(batch, p_worker_id, p_lease, p_wait, route)))
}

#[pg_extern(sql = false)]
#[allow(clippy::too_many_arguments)]
fn settle_and_consume_tasks(
    p_batch: Option<i32>,
    p_worker_id: Option<Text>,
    p_completed: Option<Vec<Option<i64>>>,
    p_completed_attempts: Option<Vec<Option<i32>>>,
    p_failed: Option<Vec<Option<i64>>>,
    p_failed_attempts: Option<Vec<Option<i32>>>,
    p_failed_errors: Option<TextArray>,
    p_lease: Option<Interval>,
    p_wait: Option<Interval>,
    p_queues: Option<TextArray>,
    fcinfo: pg_sys::FunctionCallInfo,
) -> TableIterator<
    'static,
    (
        i64,
        Option<Text>,
        Option<Payload>,
        Option<i32>,
        Option<i32>,
        Option<TimestampWithTimeZone>,
        Option<i32>,
        Text,
        &'static str,
    ),
> {
    refuse_if_renamed(fcinfo);
    let rows = settle_and_consume_tasks_with_queue(
        p_batch,
        p_worker_id,
        p_completed,
        p_completed_attempts,
        p_failed,
        p_failed_attempts,
        p_failed_errors,
        p_lease,
        p_wait,
        p_queues,
    );
    TableIterator::new(rows.map(
        |(id, name, payload, attempts, max_attempts, lease, priority, worker, outcome, _queue, _group)| {
            (id, name, payload, attempts, max_attempts, lease, priority, worker, outcome)
        },
    ))
}
