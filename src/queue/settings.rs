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
    let resumed = set(include_str!("../../sql/queries/queue_resume.sql"), p_queue);
    if resumed {
        super::wake::jobs_added();
    }
    resumed
}
