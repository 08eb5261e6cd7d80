//! How long an idle worker may sleep: until the next task it may claim
//! comes due (a worker polling at a fixed pace runs a per-second schedule's
//! slots up to that pace late).

use pgrx::datum::{Interval, TimestampWithTimeZone};
use pgrx::prelude::*;

use crate::errors::OrRaise;
use crate::plans::{plan, types};
use crate::text::Text;

/// Pages read at most: a scoped worker whose tasks lie behind more than
/// that many others' is told nothing (NULL, and it polls), not a time
/// taken from tasks outside its scope.
const PAGES_MAX: usize = 10;
/// The LIMIT of sql/queries/next_task_wait.sql.
const PAGE: usize = 8;

/// How long until the earliest enabled task this caller may claim is due:
/// `0` when one is due now, NULL when none has a next run. Tasks a claim
/// runs are left out (they come due when the claim ends). An idle worker
/// sleeps this long, at most its own poll interval (tasks created or made
/// due meanwhile are not told of).
#[pg_extern]
fn next_task_wait() -> Option<Interval> {
    let scope = crate::scopes::of_caller(crate::scopes::Capability::Worker);
    crate::access::connect(|client| {
        let stmt = plan(client, include_str!("../../sql/queries/next_task_wait.sql"), &[types::TIMESTAMPTZ, types::INT4]);
        let mut from = (TimestampWithTimeZone::negative_infinity(), i32::MIN);
        for _ in 0..PAGES_MAX {
            let page: Vec<(i32, Text, Text, Option<TimestampWithTimeZone>, Option<Interval>)> = client
                .select(&*stmt, None, &[from.0.into(), from.1.into()])
                .and_then(|rows| {
                    rows.map(|row| {
                        Ok((
                            row.get::<i32>(1)?.unwrap_or_default(),
                            row.get::<Text>(2)?.unwrap_or_default(),
                            row.get::<Text>(3)?.unwrap_or_default(),
                            row.get::<TimestampWithTimeZone>(4)?,
                            row.get::<Interval>(5)?,
                        ))
                    })
                    .collect()
                })
                .or_raise();
            let full = page.len() == PAGE;
            for (task_id, task_name, task_type, next_run_at, wait) in page {
                if crate::scopes::task_admitted(&scope, &task_name, &task_type) {
                    return wait;
                }
                from = (next_run_at.unwrap_or_else(TimestampWithTimeZone::positive_infinity), task_id.saturating_add(1));
            }
            if !full {
                return None;
            }
        }
        None
    })
}
