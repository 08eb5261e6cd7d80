//! Per-queue settings: pausing and resuming a queue.

use pgrx::prelude::*;

use crate::plans::{plan, types};
use crate::errors::OrRaise;
use crate::text::{self, Text};

fn set(statement: &'static str, p_queue: Option<Text>) -> bool {
    let queue = text::name(p_queue, "p_queue");
    crate::access::connect_mut(|client| {
        let stmt = plan(client, statement, &[types::TEXT]);
        client.update(&*stmt, None, &[(&queue).into()]).map(|rows| !rows.is_empty()).or_raise()
    })
}

/// Pauses queue `p_queue`: consumers get none of its jobs (a waiting
/// consumer keeps waiting) until `resume_queue`. True when it was running.
#[pg_extern]
fn pause_queue(p_queue: Option<Text>) -> bool {
    set(include_str!("../../sql/queries/queue_pause.sql"), p_queue)
}

/// Resumes queue `p_queue`; its waiting consumers are woken at commit.
/// True when it was paused.
#[pg_extern]
fn resume_queue(p_queue: Option<Text>) -> bool {
    let queue = text::name(p_queue, "p_queue");
    let resumed = set(include_str!("../../sql/queries/queue_resume.sql"), Some(queue.clone()));
    if resumed {
        super::wake::queue_resumed(queue.bytes());
    }
    resumed
}

/// Limits queue `p_queue` to `p_max_processing` (at least 1) jobs
/// processing at once across all consumers; NULL removes the limit. Its
/// waiting consumers are woken at commit (a higher limit makes room).
#[pg_extern]
fn set_queue_limit(p_queue: Option<Text>, p_max_processing: Option<i32>) {
    let queue = text::name(p_queue, "p_queue");
    if let Some(max) = p_max_processing {
        if max < 1 {
            crate::errors::raise_with_hint(
                pgrx::PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("p_max_processing must be at least 1, got {max}"),
                "Pass NULL for no limit, or pause the queue with distlock.pause_queue.",
            );
        }
    }
    crate::access::connect_mut(|client| {
        let stmt = plan(client, include_str!("../../sql/queries/queue_set_limit.sql"), &[types::TEXT, types::INT4]);
        client.update(&*stmt, None, &[(&queue).into(), p_max_processing.into()]).map(|_| ()).or_raise()
    });
    super::wake::queue_resumed(queue.bytes());
}
