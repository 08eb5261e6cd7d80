"""Connections the server ended while they sat idle in the pool (a restart,
a failover, pg_terminate_backend, idle_session_timeout) fail no call (issue
47, item 1: transient errors are retried within the call's bound): each is
found dead without a round trip (idle_check.py), closed, and another taken.
Before, the first call on each such connection raised Unavailable at once."""

from __future__ import annotations

import uuid
from typing import Any, Callable

import pg_distlock
from pg_distlock import aio
from pg_distlock.idle_check import ended_while_idle
from conftest import Db, connect, eventually


def end_sessions(db: Db, worker: str) -> None:
    """Ends every session whose application_name names `worker`, and waits
    until they are gone."""
    like = f"%{worker}%"
    db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE %s", (like,))
    eventually(lambda: db.admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE %s",
                                        (like,)).fetchone() == (0,), what="the sessions to end")


def calls(client: Any, name: str) -> list[Callable[[], Any]]:
    def take_lock() -> None:
        with client.lock(f"{name}-lock", timeout=1):
            pass
    return [take_lock, lambda: client.throttle(f"{name}-key", 5, 10, 60), lambda: client.generate_snowflake_id(1)]


def test_each_call_after_the_pools_sessions_ended_succeeds(db: Db, name: str) -> None:
    worker = f"idle-ended-{uuid.uuid4().hex[:8]}"
    with pg_distlock.Client(db.dsn, min_size=3, max_size=3, worker_id=worker) as client:
        client.pool.wait()
        for call in calls(client, name):
            with client.pool.connection(), client.pool.connection(), client.pool.connection():
                pass  # three sessions, idle in the pool
            end_sessions(db, worker)
            call()


async def test_each_asyncio_call_after_the_pools_sessions_ended_succeeds(db: Db, name: str) -> None:
    worker = f"idle-ended-{uuid.uuid4().hex[:8]}"
    async with aio.Client(db.dsn, min_size=3, max_size=3, worker_id=worker) as client:
        await client.pool.wait()

        async def take_lock() -> None:
            async with client.lock(f"{name}-lock", timeout=1):
                pass

        async def throttle() -> None:
            await client.throttle(f"{name}-key", 5, 10, 60)

        for call in (take_lock, throttle):
            async with client.pool.connection(), client.pool.connection(), client.pool.connection():
                pass
            end_sessions(db, worker)
            await call()


def test_a_rate_limiter_on_a_conninfo_takes_a_new_connection(db: Db, name: str) -> None:
    app = f"idle-ended-{uuid.uuid4().hex[:8]}"
    dsn = f"{db.dsn} application_name={app}"
    with pg_distlock.RateLimiter(dsn, name, max_burst=5, count_per_period=10, period=60) as limiter:
        assert limiter.try_acquire().allowed
        end_sessions(db, app)
        assert limiter.try_acquire().allowed


def test_an_idle_live_connection_with_a_notification_is_kept(db: Db) -> None:
    conn = connect(db.dsn)
    try:
        conn.execute("LISTEN idle_check")
        db.admin.execute("NOTIFY idle_check, 'x'")
        eventually(lambda: not ended_while_idle(conn) and conn.execute("SELECT 1").fetchone() == (1,),
                   what="the notified connection to serve")
        # The notification the check read is still delivered.
        assert [n.payload for n in conn.notifies(timeout=2, stop_after=1)] == ["x"]
        db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid = %s", (conn.info.backend_pid,))
        eventually(lambda: ended_while_idle(conn), what="the ended connection to be seen")
    finally:
        conn.close()
