//! How long an idle worker may sleep: until the next task it may claim
//! comes due (a worker polling at a fixed pace runs a per-second schedule's
//! slots up to that pace late).

use pgrx::datum::Interval;
use pgrx::prelude::*;

use crate::errors::OrRaise;
use crate::plans::{plan, types};

/// How long until the earliest enabled task this caller may claim (its
/// scope) may be claimed: `0` when one may now, NULL when none has a next
/// run. A task a session claim runs is left out (it comes due when the
/// claim ends); one a lease-mode claim holds counts from when its lease
/// runs out. An idle worker sleeps this long, at most its own poll interval
/// (tasks created or made due meanwhile are not told of).
#[pg_extern]
fn next_task_wait() -> Option<Interval> {
    let scope = crate::scopes::of_caller(crate::scopes::Capability::Worker);
    crate::access::connect(|client| {
        let stmt = plan(client, include_str!("../../sql/queries/next_task_wait.sql"), &[types::TEXT_ARRAY]);
        client
            .select(&*stmt, None, &[scope.as_parameter().into()])
            .and_then(|rows| rows.first().get_one::<Interval>())
            .or_raise()
    })
}
