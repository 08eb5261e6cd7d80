//! One commit per run: a worker's loop releases the task it just finished
//! and claims the next due one in the same call, so each run costs one
//! transaction instead of two (a claim and a release).

use crate::text::{self, Text};
use pgrx::datum::Interval;
use pgrx::prelude::*;
use pgrx::spi::SpiClient;

use super::claim::Mode;
use super::fetch::{claim_first_due, FetchedRow};
use super::release::release_status;
use crate::errors::{require_primary, required};

/// Releases this session's claim of `p_task_id` as `release_task_lock` does,
/// then claims the next due task as `worker_fetch_and_execute_task` does.
/// When the release is refused it raises, and nothing is claimed. The
/// released task's lock is given back at commit, so it is never the one
/// claimed next.
#[pg_extern]
fn release_and_fetch_task(
    p_task_id: Option<i32>,
    p_worker_id: Option<Text>,
    p_status: Option<Text>,
    p_error_message: default!(Option<Text>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(task_id, Option<i32>),
        name!(task_name, Option<Text>),
        name!(task_type, Option<Text>),
        name!(acquired, bool),
        name!(fencing_token, Option<i64>),
    ),
> {
    require_primary("claim tasks");
    let task_id = required(p_task_id, "p_task_id");
    let worker = text::name(p_worker_id, "p_worker_id");
    let status = release_status(p_status);
    TableIterator::once(release_then_fetch(&worker, Mode::Session, |client| {
        super::release::release_held(client, task_id, &worker, status, p_error_message.as_ref())
    }))
}

/// The same in lease mode: releases the lease-mode claim with
/// `p_fencing_token` as `release_task_lease` does, then claims the next due
/// task for `p_lease`.
#[pg_extern(name = "release_and_fetch_task")]
fn release_lease_and_fetch_task(
    p_task_id: Option<i32>,
    p_fencing_token: Option<i64>,
    p_status: Option<Text>,
    p_worker_id: Option<Text>,
    p_lease: Option<Interval>,
    p_error_message: default!(Option<Text>, "NULL"),
) -> TableIterator<
    'static,
    (
        name!(task_id, Option<i32>),
        name!(task_name, Option<Text>),
        name!(task_type, Option<Text>),
        name!(acquired, bool),
        name!(fencing_token, Option<i64>),
    ),
> {
    require_primary("claim tasks");
    let task_id = required(p_task_id, "p_task_id");
    let token = required(p_fencing_token, "p_fencing_token");
    let status = release_status(p_status);
    let worker = text::name(p_worker_id, "p_worker_id");
    let mode = super::lease::mode(p_lease);
    TableIterator::once(release_then_fetch(&worker, mode, |client| {
        super::lease::release_by_token(client, task_id, token, status, p_error_message.as_ref())
    }))
}

/// Runs `release`, then claims the next due task for `worker` in `mode`, on
/// one connection in the caller's transaction. The overloads above differ
/// only in their release (their TableIterator types repeat the fetch's: pgrx
/// reads the column names from each signature).
fn release_then_fetch(worker: &Text, mode: Mode, release: impl FnOnce(&SpiClient<'_>)) -> FetchedRow {
    crate::access::connect(|client| {
        release(client);
        claim_first_due(client, worker, mode)
    })
}
