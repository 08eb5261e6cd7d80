//! Running a task now, out of its schedule (the console's and the CLI's
//! "run now"): an admin call.

use pgrx::prelude::*;
use pgrx::PgSqlErrorCode;

use crate::errors::{raise_with_hint, OrRaise};
use crate::plans::{first_row, first_value, plan, types};

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
        let stmt = plan(client, include_str!("../../sql/queries/task_run_now_lock.sql"), &[types::INT4]);
        let locked = client
            .select(&*stmt, None, &[task_id.into()])
            .and_then(|rows| first_row(rows, |row| Ok((row.get::<bool>(1)?, row.get::<bool>(2)?, row.get::<bool>(3)?))))
            .or_raise();
        let Some((enabled, leased, due)) = locked else {
            // Unknown, or another transaction holds the row.
            let stmt = plan(client, include_str!("../../sql/queries/task_run_now_refused.sql"), &[types::INT4]);
            let enabled = client.select(&*stmt, None, &[task_id.into()]).and_then(first_value::<bool>).or_raise();
            match enabled {
                None => super::claim::raise_unknown_task(task_id),
                Some(false) => raise_disabled(task_id),
                Some(true) => return false,
            }
        };
        if enabled != Some(true) {
            raise_disabled(task_id);
        }
        // A session-mode claim (no lease) runs while its backend holds the
        // task's lock, read now that the row is locked, in a statement of
        // its own: a claim that committed after this call's first snapshot
        // shows there too (task_lock_held.sql).
        let claimed = leased.unwrap_or_else(|| {
            let stmt = plan(client, include_str!("../../sql/queries/task_lock_held.sql"), &[types::INT4]);
            client.select(&*stmt, None, &[task_id.into()]).and_then(first_value::<bool>).or_raise().unwrap_or(true)
        });
        if claimed || due == Some(true) {
            return false;
        }
        let stmt = plan(client, include_str!("../../sql/queries/task_run_now.sql"), &[types::INT4]);
        client.update(&*stmt, None, &[task_id.into()]).or_raise();
        true
    })
}

fn raise_disabled(task_id: i32) -> ! {
    raise_with_hint(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("task {task_id} is disabled"),
        "Enable it (is_enabled) to run it.",
    )
}
