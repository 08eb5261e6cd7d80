//! 0.2.0's `enqueue_task(text, jsonb, timestamptz, int, int)` (0.1.0's too),
//! `consume_task(text, interval, interval)` and
//! `consume_tasks(int, text, interval, interval)`: the symbols
//! `enqueue_task_wrapper`, `consume_task_or_wait_wrapper` and
//! `consume_tasks_or_wait_wrapper`, with 0.2.0's argument lists (no queues).

use pgrx::prelude::*;

use crate::errors::int_in_range;
use crate::queue::{consume, enqueue, without_queue, Payload, Route, MAX_BATCH};
use crate::text::Text;

#[pg_extern(sql = false)]
fn enqueue_task(
    p_task_name: Option<Text>,
    p_payload: Option<Payload>,
    p_run_after: Option<TimestampWithTimeZone>,
    p_priority: Option<i32>,
    p_max_attempts: Option<i32>,
) -> i64 {
    enqueue(p_task_name, p_payload, p_run_after, p_priority, p_max_attempts, "default".into(), None, None, None)
}

#[pg_extern(sql = false)]
fn consume_task_or_wait(
    p_worker_id: Option<Text>,
    p_lease: Option<Interval>,
    p_wait: Option<Interval>,
) -> TableIterator<'static, (i64, Text, Option<Payload>, i32, i32, TimestampWithTimeZone, i32, Text)> {
    TableIterator::new(without_queue(consume(1, p_worker_id, p_lease, p_wait, Route::Legacy)))
}

#[pg_extern(sql = false)]
fn consume_tasks_or_wait(
    p_batch: Option<i32>,
    p_worker_id: Option<Text>,
    p_lease: Option<Interval>,
    p_wait: Option<Interval>,
) -> TableIterator<'static, (i64, Text, Option<Payload>, i32, i32, TimestampWithTimeZone, i32, Text)> {
    let batch = int_in_range(p_batch, "p_batch", 1..=MAX_BATCH);
    TableIterator::new(without_queue(consume(batch, p_worker_id, p_lease, p_wait, Route::Legacy)))
}
