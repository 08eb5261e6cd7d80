"""Which optional server functions this pg_distlock offers, so the client
works with the installed release and uses newer calls once they exist."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from . import effects as fx
from ..errors import DistlockError, NotInstalled

SQL = """
SELECT p.proname::text, coalesce(p.proargnames, '{}'::text[])
  FROM pg_catalog.pg_proc p
  JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'distlock'
   AND p.proname = ANY ('{consume_task,consume_tasks,complete_tasks,settle_and_consume_tasks,try_acquire_task_lease,
                          release_and_fetch_task,queue_counters,next_task_wait,enqueue_task,enqueue_tasks}'::text[])
"""


@dataclass(frozen=True)
class Features:
    task_leases: bool = False
    """try_acquire_task_lease and the lease forms of the fetch functions."""
    consume_wait: bool = False
    """consume_task(p_worker_id, p_lease, p_wait): waits in the server."""
    consume_batch_wait: bool = False
    """consume_tasks(p_batch, p_worker_id, p_lease, p_wait)."""
    complete_batch: bool = False
    """complete_tasks(p_task_ids, p_worker_id, p_attempts)."""
    settle_and_consume: bool = False
    """settle_and_consume_tasks (0.3.0): settles finished jobs and claims in one call."""
    release_and_fetch: bool = False
    """release_and_fetch_task (0.3.0), both forms: releases a task's claim and claims the next due one."""
    next_task_wait: bool = False
    """next_task_wait (0.4.0): how long until the next task this caller may claim is due."""
    job_groups: bool = False
    """enqueue_task(..., p_group, p_unique_for) and enqueue_tasks(..., p_group) (0.4.0)."""
    lock_owner: bool = False
    """distlock.owner (0.4.0, told by its queue_counters): a lock carries its owner, and a deadlock
    across connections raises 40P01."""


def parse(rows: Iterable[tuple[Any, ...]]) -> Features:
    signatures = [(name, set(args or ())) for name, args in rows]

    def has(name: str, *args: str) -> bool:
        return any(n == name and set(args) <= a for n, a in signatures)

    return Features(
        task_leases=has("try_acquire_task_lease"),
        consume_wait=has("consume_task", "p_wait"),
        consume_batch_wait=has("consume_tasks", "p_batch", "p_wait"),
        complete_batch=has("complete_tasks", "p_task_ids", "p_worker_id", "p_attempts"),
        settle_and_consume=has("settle_and_consume_tasks", "p_completed", "p_failed_errors", "p_queues"),
        release_and_fetch=has("release_and_fetch_task", "p_worker_id", "p_status")
        and has("release_and_fetch_task", "p_fencing_token", "p_lease"),
        lock_owner=has("queue_counters"),
        next_task_wait=has("next_task_wait"),
        job_groups=has("enqueue_task", "p_group", "p_unique_for") and has("enqueue_tasks", "p_group"),
    )


INSTALLED_SQL = (
    "SELECT pg_catalog.current_database(),"
    " EXISTS (SELECT FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'pg_distlock')"
)


def require_installed() -> fx.Gen[None]:
    """Raises NotInstalled unless pg_distlock is installed in the database."""
    rows = yield from fx.execute(INSTALLED_SQL)
    database, installed = rows[0]
    if not installed:
        raise not_installed(database)


def not_installed(database: str) -> NotInstalled:
    return NotInstalled(
        f"pg_distlock is not installed in database {database!r}: "
        f"run CREATE EXTENSION pg_distlock in database {database!r}"
    )


def needs_update(what: str) -> DistlockError:
    """What a call raises for an argument its server's pg_distlock is too old
    for: the extension is installed, only not updated."""
    return DistlockError(
        f"{what} needs pg_distlock 0.4.0 in the database: run ALTER EXTENSION pg_distlock UPDATE", "55000"
    )


def detect_op() -> fx.Gen[Features]:
    found: Features = yield fx.Detect()
    return found
