"""The admin actions: what each will do, said before it is done, and doing it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import psycopg
from psycopg.rows import dict_row

from . import reads
from .._core.admin import JOBS_SQL, LIMIT_SQL, PAUSE_SQL, RELEASE_LEASE_SQL, RESUME_SQL, RUN_NOW_SQL


@dataclass(frozen=True)
class Action:
    command: str
    question: str
    sql: str
    params: tuple[Any, ...]


def _which(queue: Optional[str], ids: list[int]) -> str:
    parts = []
    if queue is not None:
        parts.append(f"of queue {queue!r}")
    if ids:
        parts.append("among ids " + ", ".join(map(str, ids)))
    return " ".join(parts) or "of every queue"


def plan(conn: psycopg.Connection[Any], command: str, *, queue: Optional[str] = None, ids: Optional[list[int]] = None,
         name: Optional[str] = None, timeout_minutes: int = 30, max_processing: Optional[int] = None,
         task_id: Optional[int] = None) -> Action:
    """The action `command` with its arguments; ValueError when one it needs is missing."""
    ids = ids or []
    if command in ("retry-dead", "delete-dead"):
        dead = reads.count_dead(conn, queue, ids)
        known = "" if dead is None else f"{dead} "
        verb = "Retry" if command == "retry-dead" else "Delete"
        return Action(command, f"{verb} {known}dead job(s) {_which(queue, ids)}?",
                      JOBS_SQL[command.replace("-", "_")], (queue, ids or None))
    if command == "requeue":
        held = reads.count_jobs(conn, "processing", queue, ids)
        known = "" if held is None else f"{held} "
        return Action(command, f"Return {known}processing job(s) {_which(queue, ids)} to the queue? "
                               "Their consumers' settles will be refused.",
                      JOBS_SQL["requeue"], (queue, ids or None))
    if command in ("pause", "resume"):
        if not queue:
            raise ValueError(f"{command} needs a queue")
        return Action(command, f"{command.capitalize()} queue {queue!r}?",
                      PAUSE_SQL if command == "pause" else RESUME_SQL, (queue,))
    if command == "limit":
        if not queue:
            raise ValueError("limit needs a queue")
        question = (f"Remove the concurrency limit of queue {queue!r}?" if max_processing is None
                    else f"Limit queue {queue!r} to {max_processing} job(s) processing at once?")
        return Action(command, question, LIMIT_SQL, (queue, max_processing))
    if command == "run-now":
        if task_id is None:
            raise ValueError("run-now needs a task id")
        if reads.task_definition(conn, task_id) == []:
            raise ValueError(f"no task {task_id} in this database")
        return Action(command, f"Run task {task_id} now? Its schedule stays as it is.",
                      RUN_NOW_SQL, (task_id,))
    if command in ("enable-task", "disable-task"):
        if task_id is None:
            raise ValueError(f"{command} needs a task id")
        enable = command == "enable-task"
        return Action(command, _task_question(conn, task_id, enable), SET_ENABLED_SQL, (task_id, enable, enable))
    if command == "release-lease":
        if not name:
            raise ValueError("release-lease needs a lease name")
        return Action(command, f"Force-release lease {name!r}? Its holder's token stops working.",
                      RELEASE_LEASE_SQL, (name,))
    if command == "sweep":
        return Action(command,
                      f"Run the recovery sweep (timeout {timeout_minutes} minutes for tasks without their own)?",
                      "SELECT task_id, worker_id, lock_released FROM distlock.check_and_recover_timeout_tasks(%s)",
                      (timeout_minutes,))
    raise ValueError(f"unknown action {command!r}")


# Locks the row without waiting (a claim or release in flight holds it for
# an instant; a transaction left open that holds it must not hang the
# action), then changes it only when it differs: true when it changed.
SET_ENABLED_SQL = """
    WITH target AS (SELECT t.id FROM distlock.scheduled_tasks t
                     WHERE t.id = %s::integer AND t.is_enabled IS DISTINCT FROM %s::boolean FOR UPDATE NOWAIT),
         changed AS (UPDATE distlock.scheduled_tasks t SET is_enabled = %s::boolean
                       FROM target WHERE t.id = target.id RETURNING t.id)
    SELECT count(*) > 0 FROM changed"""


def _task_question(conn: psycopg.Connection[Any], task_id: int, enable: bool) -> str:
    """What enabling or disabling task `task_id` does, naming it; ValueError for no such task."""
    rows = reads.task_definition(conn, task_id)
    if rows == []:
        raise ValueError(f"no task {task_id} in this database")
    task = rows[0] if rows else None
    named = f"task {task_id}" + (f" {task['task_name']!r}" if task else "")
    if not enable:
        return f"Disable {named}? Workers stop claiming it until it is enabled again; a run in progress goes on."
    if task and task["next_run_at"] is None:
        return f"Enable {named}? It has no next run: workers claim it once its next_run_at is set."
    when = f" ({task['next_run_at'].isoformat(sep=' ', timespec='seconds')})" if task else ""
    return f"Enable {named}? Workers claim it from its next run{when}, at once if that has passed."


def perform(conn: psycopg.Connection[Any], action: Action) -> Any:
    """Runs the action: the sweep's recovered claims, else the one value the
    function returns (a count, or whether it changed something)."""
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(action.sql, action.params)
        rows = cur.fetchall()
    if action.command == "sweep":
        return {"recovered": rows}
    return next(iter(rows[0].values())) if rows else None


def may_act(conn: psycopg.Connection[Any]) -> bool:
    """Whether the connected role holds the admin capability (or owns the
    extension): the privilege every action needs."""
    row = conn.execute(
        "SELECT pg_catalog.has_function_privilege("
        "pg_catalog.to_regprocedure('distlock.retry_dead_jobs(text, bigint[])'), 'EXECUTE')").fetchone()
    return bool(row and row[0])
