//! 0.1.0's `consume_task(text, interval)` and
//! `consume_tasks(int, text, interval)`: the symbols `consume_task_wrapper`
//! and `consume_tasks_wrapper`, with 0.1.0's argument lists (no `p_wait`).

use pgrx::prelude::*;

use crate::errors::int_in_range;
use crate::queue::{consume, without_queue, Payload, Route, MAX_BATCH};
use crate::text::Text;

#[pg_extern(sql = false)]
fn consume_task(
    p_worker_id: Option<Text>,
    p_lease: Option<Interval>,
) -> TableIterator<'static, (i64, Text, Option<Payload>, i32, i32, TimestampWithTimeZone, i32, Text)> {
    TableIterator::new(without_queue(consume(1, p_worker_id, p_lease, None, Route::Legacy)))
}

#[pg_extern(sql = false)]
fn consume_tasks(
    p_batch: Option<i32>,
    p_worker_id: Option<Text>,
    p_lease: Option<Interval>,
) -> TableIterator<'static, (i64, Text, Option<Payload>, i32, i32, TimestampWithTimeZone, i32, Text)> {
    let batch = int_in_range(p_batch, "p_batch", 1..=MAX_BATCH);
    TableIterator::new(without_queue(consume(batch, p_worker_id, p_lease, None, Route::Legacy)))
}
