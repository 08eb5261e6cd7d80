"""Review of the idle check (idle_check.py, used at checkout by _borrow and
_open, sync and asyncio) and of the timeout of try_acquire/throttle: failing
tests for what the change claims but does not do."""

from __future__ import annotations

import asyncio
import select
import time
import uuid
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import pg_distlock
from pg_distlock import aio
from conftest import Db, connect


def readable(fd: int, wait_ms: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(wait_ms))


def slow_exit(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any], tables: int = 1000) -> None:
    """Gives `conn`'s session temporary tables enough that, once ended, its
    backend drops them (before_shmem_exit, after it sent its FATAL) for a few
    hundred milliseconds before it closes the socket. Sync connections only."""
    assert isinstance(conn, psycopg.Connection)
    for first in range(0, tables, 100):
        conn.execute(";".join(
            f"CREATE TEMP TABLE slow_exit_{i} (a int PRIMARY KEY, b text)" for i in range(first, first + 100)))


def terminate_and_wait_for_fatal(db: Db, pid: int, fd: int) -> None:
    """Ends backend `pid` and returns once its FATAL is on the client's
    socket `fd` (not read: the socket is only polled), while the backend is
    still exiting (dropping its temporary tables), i.e. before the end of
    the stream."""
    db.admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    assert readable(fd, 10_000), "no FATAL within 10 s"
    assert db.value("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", pid) == 1, \
        "the backend exited already: the scenario needs a slower exit"


# -- 1. A dead session whose end of stream comes later than 50 ms after its FATAL
#
# ended_while_idle reads the server's FATAL ("terminating connection due to
# administrator command") with consume_input, then waits END_FOLLOWS_MS (50 ms)
# for the end of the stream, and calls the connection alive when it has not
# come. A backend closes its socket only at the very end of its exit, after its
# before_shmem_exit work: a session with temporary tables drops them first
# (here ~300 ms; on a loaded server, or through a proxy, a delay of more than
# 50 ms has other causes too). The FATAL is already in libpq's buffer and says
# the session is over (libpq hands it to the notice processor once parsed),
# yet the connection is handed to the call, which fails with Unavailable:
# exactly the failure the change claims to remove.


@pytest.mark.parametrize("call", ["throttle", "lock"])
def test_a_pooled_session_ended_with_a_slow_exit_does_not_fail_a_call(db: Db, name: str, call: str) -> None:
    """throttle borrows (Runtime._borrow), lock holds a session (Runtime._open)."""
    with pg_distlock.Client(db.dsn, min_size=1, max_size=1) as client:
        client.pool.wait()
        with client.pool.connection() as conn:
            slow_exit(conn)
            pid, fd = conn.info.backend_pid, conn.pgconn.socket
        terminate_and_wait_for_fatal(db, pid, fd)
        if call == "throttle":
            assert client.throttle(f"{name}-key", 5, 10, 60).allowed
        else:
            with client.lock(name, timeout=1):
                pass


def test_a_conninfo_session_ended_with_a_slow_exit_does_not_fail_a_try(db: Db, name: str) -> None:
    app = f"review-idle-{uuid.uuid4().hex[:8]}"
    with pg_distlock.RateLimiter(f"{db.dsn} application_name={app}", name, max_burst=5,
                                 count_per_period=10, period=60) as limiter:
        assert limiter.try_acquire().allowed
        with connect(db.dsn) as admin:
            pid = admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,)).fetchone()[0]
        shared = limiter._rt._shared
        slow_exit(shared)
        terminate_and_wait_for_fatal(db, pid, shared.pgconn.socket)
        assert limiter.try_acquire().allowed



async def test_an_asyncio_pooled_session_ended_with_a_slow_exit_does_not_fail_a_throttle(db: Db, name: str) -> None:
    async with aio.Client(db.dsn, min_size=1, max_size=1) as client:
        await client.pool.wait()
        async with client.pool.connection() as conn:
            for first in range(0, 1000, 100):
                await conn.execute(";".join(
                    f"CREATE TEMP TABLE slow_exit_{i} (a int PRIMARY KEY, b text)" for i in range(first, first + 100)))
            pid, fd = conn.info.backend_pid, conn.pgconn.socket
        terminate_and_wait_for_fatal(db, pid, fd)
        assert (await client.throttle(f"{name}-key", 5, 10, 60)).allowed

# -- 2. A live connection with a notification waiting stalls every checkout 50 ms
#
# A pool whose connections LISTEN (configure=, an application's cache
# invalidation sharing its pool with pg_distlock) has notifications on their
# sockets between calls. ended_while_idle reads them, then waits END_FOLLOWS_MS
# for an end of stream that never comes: 50 ms on every call that takes such a
# connection (up to 100 ms when they keep coming), a sync poll that in asyncio
# blocks the event loop and every other task on it. What was read can be told
# apart at once (a FATAL is parsed as a notice, a notification as one): no wait
# is needed for a connection that had none.

CHANNEL = "review_idle_ch"


def listening_pool(db: Db) -> ConnectionPool[Any]:
    return ConnectionPool(db.dsn, min_size=1, max_size=1, open=True,
                          configure=lambda conn: (conn.execute(f"LISTEN {CHANNEL}"), conn.commit()))


def notified(db: Db, fd: int) -> None:
    db.admin.execute(f"NOTIFY {CHANNEL}, 'x'")
    assert readable(fd, 10_000), "the notification did not come"


def test_a_pending_notification_does_not_stall_a_throttle(db: Db, name: str) -> None:
    with listening_pool(db) as pool:
        pool.wait()
        with pool.connection() as conn:
            fd = conn.pgconn.socket
        client = pg_distlock.Client(pool)
        client.throttle(f"{name}-key", 5, 10, 60)
        took = []
        for _ in range(3):
            notified(db, fd)
            started = time.monotonic()
            assert client.throttle(f"{name}-key", 5, 10, 60).allowed
            took.append(time.monotonic() - started)
        assert min(took) < 0.03, f"each call on a live connection with a notification took {min(took) * 1000:.0f} ms or more"


async def test_a_pending_notification_does_not_block_the_event_loop(db: Db, name: str) -> None:
    from psycopg_pool import AsyncConnectionPool
    pool = AsyncConnectionPool(db.dsn, min_size=1, max_size=1, open=False, configure=listen_async)
    await pool.open(wait=True)
    try:
        async with pool.connection() as conn:
            fd = conn.pgconn.socket
        client = aio.Client(pool)
        await client.throttle(f"{name}-key", 5, 10, 60)
        gaps = []
        for _ in range(3):
            notified(db, fd)
            stop = asyncio.Event()
            longest = 0.0

            async def tick() -> None:
                nonlocal longest
                last = time.monotonic()
                while not stop.is_set():
                    await asyncio.sleep(0.001)
                    now = time.monotonic()
                    longest = max(longest, now - last)
                    last = now

            ticker = asyncio.create_task(tick())
            await asyncio.sleep(0.01)
            assert (await client.throttle(f"{name}-key", 5, 10, 60)).allowed
            stop.set()
            await ticker
            gaps.append(longest)
        assert min(gaps) < 0.03, f"the event loop stood still {min(gaps) * 1000:.0f} ms or more in a checkout"
    finally:
        await pool.close()


async def listen_async(conn: psycopg.AsyncConnection[Any]) -> None:
    await conn.execute(f"LISTEN {CHANNEL}")
    await conn.commit()


# -- 3. Ctrl-C while a held session's connection is checked leaks it from the pool
#
# Runtime._open takes the connection with getconn() and checks it before it is
# wrapped in a Held whose close gives it back: a KeyboardInterrupt raised in
# the check (its poll waits up to 50 ms twice on a connection with something
# to read) leaves the connection out of the pool for good. With max_size=1,
# every later call then waits for a connection that never comes. _borrow
# checks inside the pool's connection() block, which gives it back.


def test_ctrl_c_in_the_idle_check_of_a_held_session_gives_its_connection_back(
    db: Db, name: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pg_distlock._sync as sync_runtime

    def interrupted(conn: Any) -> bool:
        raise KeyboardInterrupt  # as a Ctrl-C during the check's poll does

    with pg_distlock.Client(db.dsn, min_size=1, max_size=1) as client:
        client.pool.wait()
        with monkeypatch.context() as patched:
            patched.setattr(sync_runtime, "ended_while_idle", interrupted)
            with pytest.raises(KeyboardInterrupt):
                with client.lock(name, timeout=1):
                    pass
        assert client.pool.get_stats().get("pool_available") == 1, client.pool.get_stats()
        with client.lock(name, timeout=1):
            pass
