//! Adding jobs.

use crate::text::{self, Text};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use super::payload::Payload;
use crate::errors::{raise, required, OrRaise};
use crate::plans::{first_value, plan, types};

/// Queues a job in queue `p_queue`; returns its id.
#[pg_extern(name = "enqueue_task")]
fn enqueue_task_in_queue(
    p_task_name: Option<Text>,
    p_payload: default!(Option<Payload>, "'{}'"),
    p_run_after: default!(Option<TimestampWithTimeZone>, "now()"),
    p_priority: default!(Option<i32>, 0),
    p_max_attempts: default!(Option<i32>, 5),
    p_queue: default!(Option<Text>, "'default'"),
) -> i64 {
    let queue = text::name(p_queue, "p_queue");
    enqueue(p_task_name, p_payload, p_run_after, p_priority, p_max_attempts, queue)
}

pub(crate) fn enqueue(
    p_task_name: Option<Text>,
    p_payload: Option<Payload>,
    p_run_after: Option<TimestampWithTimeZone>,
    p_priority: Option<i32>,
    p_max_attempts: Option<i32>,
    queue: Text,
) -> i64 {
    let task_name = text::name(p_task_name, "p_task_name");
    let payload = required(p_payload, "p_payload");
    let run_after = required(p_run_after, "p_run_after");
    let priority = required(p_priority, "p_priority");
    let max_attempts = crate::errors::int_in_range(p_max_attempts, "p_max_attempts", 1..=i32::MAX);
    crate::scopes::require(crate::scopes::Capability::Producer, "job name", &task_name);
    let id = crate::access::connect_mut(|client| {
        let values = [
            (&task_name).into(),
            payload.into(),
            run_after.into(),
            priority.into(),
            max_attempts.into(),
            crate::access::caller().into(),
            (&queue).into(),
        ];
        // producer_role and queue came with the same update.
        let enqueued = if crate::version::has_column(c"task_queue", c"producer_role") {
            let stmt = plan(
                client,
                include_str!("../../sql/queries/queue_enqueue.sql"),
                &[types::TEXT, types::JSONB, types::TIMESTAMPTZ, types::INT4, types::INT4, types::OID, types::TEXT],
            );
            client.update(&*stmt, None, &values)
        } else {
            let stmt = plan(
                client,
                include_str!("../../sql/queries/queue_enqueue_0_2_0.sql"),
                &[types::TEXT, types::JSONB, types::TIMESTAMPTZ, types::INT4, types::INT4],
            );
            client.update(&*stmt, None, &values[..5])
        };
        enqueued
            .and_then(first_value::<i64>)
            .or_raise()
            .unwrap_or_else(|| raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "pg_distlock: enqueue returned no id"))
    });
    super::wake::jobs_added();
    id
}
