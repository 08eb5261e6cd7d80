"""Whether the server ended a connection while it sat idle (a restart, a
failover, pg_terminate_backend, idle_session_timeout): its socket then
holds the server's last words and the end of the stream. Found without a
round trip (one poll of the socket), so that a call takes another
connection instead of failing on one that was dead before it began."""

from __future__ import annotations

import select
from typing import Any

import psycopg
from psycopg.pq import ConnStatus, TransactionStatus

# Reads of what the socket holds before it counts as alive: a FATAL
# message, then the end of the stream; notifications may come between.
READS = 3
# After something was read, how long the end of the stream may take to
# follow it: the server sends its FATAL before it exits, and closes the
# socket as it exits (libpq takes the FATAL, unasked for, as a notice).
# Only a connection that had something to read waits it.
END_FOLLOWS_MS = 50


def _readable(fd: int, wait_ms: int = 0) -> bool:
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(wait_ms))
    return bool(select.select([fd], [], [], wait_ms / 1000)[0])  # Windows: no poll


def ended_while_idle(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True when `conn`, idle and not in use, was ended by its server; a
    connection in a transaction or running a statement is not looked at."""
    pgconn = conn.pgconn
    if conn.closed or pgconn.status != ConnStatus.OK:
        return True
    if pgconn.transaction_status != TransactionStatus.IDLE:
        return False
    for read in range(READS):
        try:
            if not _readable(pgconn.socket, END_FOLLOWS_MS if read else 0):
                return False
            pgconn.consume_input()
        except (OSError, ValueError, psycopg.OperationalError):
            return True
        if pgconn.status != ConnStatus.OK:
            return True
    return False
