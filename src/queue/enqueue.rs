//! Adding jobs.

use crate::text::{self, Text};
use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use super::payload::{Payload, Payloads};
use crate::errors::{raise, required, OrRaise};
use crate::plans::{first_value, plan, types};

/// Queues a job in queue `p_queue`; returns its id. With `p_unique_key`,
/// when the queue already has an unfinished (pending, failed or processing)
/// job with that key, queues nothing and returns that job's id.
#[pg_extern(name = "enqueue_task")]
fn enqueue_task_in_queue(
    p_task_name: Option<Text>,
    p_payload: default!(Option<Payload>, "'{}'"),
    p_run_after: default!(Option<TimestampWithTimeZone>, "now()"),
    p_priority: default!(Option<i32>, 0),
    p_max_attempts: default!(Option<i32>, 5),
    p_queue: default!(Option<Text>, "'default'"),
    p_unique_key: default!(Option<Text>, "NULL"),
) -> i64 {
    let queue = text::name(p_queue, "p_queue");
    // Names' limit of 1000 bytes keeps (queue, key) within a btree entry.
    let unique_key = p_unique_key.map(|key| text::checked_name(key, "p_unique_key"));
    enqueue(p_task_name, p_payload, p_run_after, p_priority, p_max_attempts, queue, unique_key)
}

/// Queues one job of `p_task_name` in queue `p_queue` per element of
/// `p_payloads`, in one statement; returns their ids in the array's order.
/// Without unique keys (enqueue_task takes one).
#[pg_extern(name = "enqueue_tasks")]
fn enqueue_tasks(
    p_task_name: Option<Text>,
    p_payloads: Option<Payloads>,
    p_run_after: default!(Option<TimestampWithTimeZone>, "now()"),
    p_priority: default!(Option<i32>, 0),
    p_max_attempts: default!(Option<i32>, 5),
    p_queue: default!(Option<Text>, "'default'"),
) -> SetOfIterator<'static, i64> {
    let task_name = text::name(p_task_name, "p_task_name");
    let payloads = required(p_payloads, "p_payloads");
    let run_after = required(p_run_after, "p_run_after");
    let priority = required(p_priority, "p_priority");
    let max_attempts = crate::errors::int_in_range(p_max_attempts, "p_max_attempts", 1..=i32::MAX);
    let queue = text::name(p_queue, "p_queue");
    crate::scopes::require(crate::scopes::Capability::Producer, "job name", &task_name);
    let ids = crate::access::connect_mut(|client| {
        if payloads.contains_nulls() {
            let stmt = plan(client, include_str!("../../sql/queries/payloads_first_null.sql"), &[types::JSONB_ARRAY]);
            let at = client.select(&*stmt, None, &[payloads.into()]).and_then(first_value::<i64>).or_raise();
            raise(
                PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
                format!("p_payloads must not hold NULL, got one at position {}", at.unwrap_or_default()),
            );
        }
        let stmt = plan(
            client,
            include_str!("../../sql/queries/queue_enqueue_many.sql"),
            &[types::TEXT, types::JSONB_ARRAY, types::TIMESTAMPTZ, types::INT4, types::INT4, types::OID, types::TEXT],
        );
        let values = [
            (&task_name).into(),
            payloads.into(),
            run_after.into(),
            priority.into(),
            max_attempts.into(),
            crate::access::caller().into(),
            (&queue).into(),
        ];
        client
            .update(&*stmt, None, &values)
            .and_then(|rows| rows.map(|row| row.get::<i64>(1).map(Option::unwrap_or_default)).collect::<Result<Vec<_>, _>>())
            .or_raise()
    });
    super::wake::jobs_added(Some(queue.bytes()), ids.len());
    SetOfIterator::new(ids)
}

pub(crate) fn enqueue(
    p_task_name: Option<Text>,
    p_payload: Option<Payload>,
    p_run_after: Option<TimestampWithTimeZone>,
    p_priority: Option<i32>,
    p_max_attempts: Option<i32>,
    queue: Text,
    unique_key: Option<Text>,
) -> i64 {
    let task_name = text::name(p_task_name, "p_task_name");
    let payload = required(p_payload, "p_payload");
    let run_after = required(p_run_after, "p_run_after");
    let priority = required(p_priority, "p_priority");
    let max_attempts = crate::errors::int_in_range(p_max_attempts, "p_max_attempts", 1..=i32::MAX);
    crate::scopes::require(crate::scopes::Capability::Producer, "job name", &task_name);
    let (id, added) = crate::access::connect_mut(|client| {
        let mut values = vec![
            (&task_name).into(),
            payload.into(),
            run_after.into(),
            priority.into(),
            max_attempts.into(),
            crate::access::caller().into(),
            (&queue).into(),
        ];
        const TYPES: [pgrx::PgOid; 8] =
            [types::TEXT, types::JSONB, types::TIMESTAMPTZ, types::INT4, types::INT4, types::OID, types::TEXT, types::TEXT];
        // producer_role, queue and unique_key came with the same update.
        if !crate::version::has_column(c"task_queue", c"producer_role") {
            let stmt = plan(client, include_str!("../../sql/queries/queue_enqueue_0_2_0.sql"), &TYPES[..5]);
            return (inserted_id(client.update(&*stmt, None, &values[..5])), true);
        }
        let Some(key) = &unique_key else {
            let stmt = plan(client, include_str!("../../sql/queries/queue_enqueue.sql"), &TYPES[..7]);
            return (inserted_id(client.update(&*stmt, None, &values)), true);
        };
        let insert = plan(client, include_str!("../../sql/queries/queue_enqueue_unique.sql"), &TYPES);
        let existing = plan(client, include_str!("../../sql/queries/queue_unique_job.sql"), &[types::TEXT, types::TEXT]);
        values.push(key.into());
        // The job that held the key may finish between the two statements
        // (each reads what committed before it): then insert again.
        loop {
            if let Some(id) = client.update(&*insert, None, &values).and_then(first_value::<i64>).or_raise() {
                return (id, true);
            }
            let found = client.update(&*existing, None, &[(&queue).into(), key.into()]);
            if let Some(id) = found.and_then(first_value::<i64>).or_raise() {
                return (id, false);
            }
            check_for_interrupts!();
        }
    });
    if added {
        super::wake::jobs_added(Some(queue.bytes()), 1);
    }
    id
}

fn inserted_id(inserted: pgrx::spi::SpiResult<pgrx::spi::SpiTupleTable<'_>>) -> i64 {
    inserted
        .and_then(first_value::<i64>)
        .or_raise()
        .unwrap_or_else(|| raise(PgSqlErrorCode::ERRCODE_INTERNAL_ERROR, "pg_distlock: enqueue returned no id"))
}
