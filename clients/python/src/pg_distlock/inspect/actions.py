"""Admin actions, each asked for first (unless --yes) with what it will do."""

from __future__ import annotations

import argparse
from typing import Any, Callable, Optional, TextIO

import psycopg
from psycopg.rows import dict_row

from . import reads


def ask(question: str, stdin: TextIO, out: TextIO) -> bool:
    out.write(f"{question} [y/N] ")
    out.flush()
    answer = stdin.readline()
    if not answer:
        out.write("\n")
    return answer.strip().lower() in ("y", "yes")


def _which(queue: Optional[str], ids: list[int]) -> str:
    parts = []
    if queue is not None:
        parts.append(f"of queue {queue!r}")
    if ids:
        parts.append("among ids " + ", ".join(map(str, ids)))
    return " ".join(parts) or "of every queue"


def run(conn: psycopg.Connection[Any], args: argparse.Namespace, confirm: Callable[[str], bool]) -> Optional[Any]:
    """Runs the action `args.command` once confirmed; its result, or None
    when declined."""
    command = args.command
    params: tuple[Any, ...]
    if command in ("retry-dead", "delete-dead"):
        dead = reads.count_dead(conn, args.queue, args.ids)
        known = "" if dead is None else f"{dead} "
        verb = "Retry" if command == "retry-dead" else "Delete"
        question = f"{verb} {known}dead job(s) {_which(args.queue, args.ids)}?"
        function = "retry_dead_jobs" if command == "retry-dead" else "delete_dead_jobs"
        sql, params = f"SELECT distlock.{function}(%s, %s::bigint[])", (args.queue, args.ids or None)
    elif command in ("pause", "resume"):
        question = f"{command.capitalize()} queue {args.queue!r}?"
        sql, params = f"SELECT distlock.{command}_queue(%s)", (args.queue,)
    elif command == "release-lease":
        question = f"Force-release lease {args.name!r}? Its holder's token stops working."
        sql, params = "SELECT distlock.force_release_lease(%s)", (args.name,)
    elif command == "sweep":
        question = f"Run the recovery sweep (timeout {args.timeout_minutes} minutes for tasks without their own)?"
        sql = "SELECT task_id, worker_id, lock_released FROM distlock.check_and_recover_timeout_tasks(%s)"
        params = (args.timeout_minutes,)
    else:
        raise AssertionError(f"unknown command {command}")
    if not (args.yes or confirm(question)):
        return None
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(sql, params)
        rows = cur.fetchall()
    if command == "sweep":
        return {"recovered": rows}
    # Every other action returns one value: a count or whether it changed something.
    return next(iter(rows[0].values())) if rows else None
