//! Fencing tokens: downstream writes carry the token of the claim they
//! belong to, and are refused once that claim is no longer the current one.

use pgrx::prelude::*;

use crate::errors::{required, OrRaise};
use crate::plans::{first_value, plan, types};

/// True only for the token of the claim that currently runs the task.
#[pg_extern(stable)]
fn check_fencing_token(p_task_id: Option<i32>, p_token: Option<i64>) -> bool {
    let task_id = required(p_task_id, "p_task_id");
    let token = required(p_token, "p_token");
    crate::access::connect(|client| {
        let stmt = plan(client, include_str!("../../sql/queries/current_token.sql"), &[types::INT4]);
        let current = client
            .select(&*stmt, None, &[task_id.into()])
            .and_then(first_value::<i64>)
            .or_raise();
        current == Some(token)
    })
}
