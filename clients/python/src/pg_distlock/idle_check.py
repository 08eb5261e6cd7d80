"""Whether the server ended a connection while it sat idle (a restart, a
failover, pg_terminate_backend, idle_session_timeout): the server sends a
FATAL message before it exits and closes the socket as it exits (which can
be much later: a session's temporary tables are dropped first). Found
without a round trip and without waiting: one poll of the socket, and what
it holds parsed, so that a call takes another connection instead of failing
on one that was dead before it began."""

from __future__ import annotations

import select
from typing import Any

import psycopg
from psycopg.errors import Diagnostic
from psycopg.pq import ConnStatus, TransactionStatus


def _readable(fd: int) -> bool:
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([fd], [], [], 0)[0])  # Windows: no poll


def ended_while_idle(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True when `conn`, idle and not in use, was ended by its server; a
    connection in a transaction or running a statement is not looked at.
    Notifications that came meanwhile stay queued for psycopg."""
    pgconn = conn.pgconn
    if conn.closed or pgconn.status != ConnStatus.OK:
        return True
    if pgconn.transaction_status != TransactionStatus.IDLE:
        return False
    fatal: list[Diagnostic] = []

    def on_notice(diag: Diagnostic) -> None:
        # libpq hands an error that comes while no statement runs to the
        # notice handlers: the server's last words.
        if (diag.severity_nonlocalized or diag.severity) in ("FATAL", "PANIC"):
            fatal.append(diag)

    try:
        if not _readable(pgconn.socket):
            return False
        pgconn.consume_input()
        conn.add_notice_handler(on_notice)
        try:
            pgconn.is_busy()  # parses what was read
        finally:
            conn.remove_notice_handler(on_notice)
        # Notifications parsed here are handed to psycopg as its own reads
        # hand them (its handlers, or the backlog of notifies()).
        while (notification := pgconn.notifies()) is not None:
            if pgconn.notify_handler:
                pgconn.notify_handler(notification)
    except (OSError, ValueError, psycopg.OperationalError):
        return True
    return bool(fatal) or pgconn.status != ConnStatus.OK
