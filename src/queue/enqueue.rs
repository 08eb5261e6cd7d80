//! Adding jobs.

use crate::text::{self, Text};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use super::payload::Payload;
use crate::errors::{raise, required, OrRaise};
use crate::plans::{first_value, plan, types};

/// Queues a job; returns its id.
#[pg_extern]
fn enqueue_task(
    p_task_name: Option<Text>,
    p_payload: default!(Option<Payload>, "'{}'"),
    p_run_after: default!(Option<TimestampWithTimeZone>, "now()"),
    p_priority: default!(Option<i32>, 0),
    p_max_attempts: default!(Option<i32>, 5),
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
        ];
        let enqueued = if crate::version::has_column(c"task_queue", c"producer_role") {
            let stmt = plan(
                client,
                include_str!("../../sql/queries/queue_enqueue.sql"),
                &[types::TEXT, types::JSONB, types::TIMESTAMPTZ, types::INT4, types::INT4, types::OID],
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
