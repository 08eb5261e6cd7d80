//! Running a task now, out of its schedule (the console's and the CLI's
//! "run now"): an admin call.

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise_with_hint, OrRaise};
use crate::plans::{plan, types};

/// Makes task `p_task_id` due now without changing its schedule: the next
/// worker to look claims it (the run's slot is now), and its release
/// schedules the next run from the schedule as always. False when a claim
/// runs the task (that run is the run) or it is due already; P0002 for an
/// unknown task, 55000 for a disabled one.
#[pg_extern]
fn run_task_now(p_task_id: Option<i32>) -> bool {
    let Some(task_id) = p_task_id else {
        crate::errors::raise(PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED, "p_task_id must not be NULL")
    };
    crate::access::connect_mut(|client| {
        let stmt = plan(client, include_str!("../../sql/queries/task_run_now.sql"), &[types::INT4]);
        if !client.update(&*stmt, None, &[task_id.into()]).or_raise().is_empty() {
            return true;
        }
        let stmt = plan(client, include_str!("../../sql/queries/task_run_now_refused.sql"), &[types::INT4]);
        let rows = client.select(&*stmt, None, &[task_id.into()]).or_raise();
        if rows.is_empty() {
            super::claim::raise_unknown_task(task_id);
        }
        match rows.first().get_one::<bool>().or_raise() {
            Some(false) => raise_with_hint(
                PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                format!("task {task_id} is disabled"),
                "Enable it (is_enabled) to run it.",
            ),
            // A claim runs it, or it is due already.
            _ => false,
        }
    })
}
