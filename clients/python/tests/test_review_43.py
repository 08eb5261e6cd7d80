"""Review 43 of 325cd22 (the conninfo source's shared connection opened
outside its lock, published under it): each test is a break the review
found, and fails on 325cd22 (run 2026-11-27 against PostgreSQL 15). Before
325cd22 a connect held _shared_lock, so close() waited for it and closed
what it opened, and concurrent first calls shared one connect."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
import uuid
from typing import Iterator

import pg_distlock
from pg_distlock import aio
from conftest import PRIMARY, Db, dsn


@contextlib.contextmanager
def delayed_proxy(upstream: int, delay: float) -> Iterator[int]:
    """A TCP proxy to 127.0.0.1:`upstream` that forwards each connection
    only `delay` seconds after accepting it (a server slow to answer: a
    distant region, a busy pg_hba/LDAP, a failover in progress); its port."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    socks: list[socket.socket] = [listener]

    def pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def serve(client: socket.socket) -> None:
        time.sleep(delay)
        try:
            server = socket.create_connection(("127.0.0.1", upstream))
        except OSError:
            client.close()
            return
        socks.append(server)
        threading.Thread(target=pump, args=(client, server), daemon=True).start()
        threading.Thread(target=pump, args=(server, client), daemon=True).start()

    def accept() -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = listener.accept()
                socks.append(client)
                threading.Thread(target=serve, args=(client,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        for s in socks:
            with contextlib.suppress(OSError):
                s.close()


def sessions_named(db: Db, app: str) -> int:
    found = db.value("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", app)
    assert isinstance(found, int)
    return found


# -- R43-B1. close() no longer waits for a connect in flight: the connection survives close()


def test_a_connection_opened_while_the_object_is_closed_is_closed_too(db: Db, name: str) -> None:
    """A RateLimiter of a conninfo: one thread's try_acquire() is connecting
    (the server takes a second to answer) when another thread closes the
    limiter (a web server shutting down, a `with` block ending). close()
    finds no shared connection and returns; the connect then completes and
    publishes its connection as the shared one, which nothing closes again:
    the README promises the object's connections are closed "when the object
    is closed". Before 325cd22, close() waited for the connect's lock and
    closed it."""
    app = f"r43-close-{uuid.uuid4().hex[:8]}"
    with delayed_proxy(PRIMARY, 1.0) as port:
        limiter = pg_distlock.RateLimiter(dsn(port, db.name, application_name=app), name,
                                          max_burst=5, count_per_period=10, period=60)

        def try_once() -> None:
            with contextlib.suppress(pg_distlock.DistlockError):
                limiter.try_acquire()

        thread = threading.Thread(target=try_once, daemon=True)
        thread.start()
        time.sleep(0.3)  # connecting through the proxy
        limiter.close()
        thread.join(10)
        time.sleep(0.3)
        left = sessions_named(db, app)
        try:
            assert left == 0, f"{left} connection(s) of the limiter open after close() returned"
        finally:
            limiter.close()


async def test_an_asyncio_connection_opened_while_the_object_is_closed_is_closed_too(db: Db, name: str) -> None:
    app = f"r43-aclose-{uuid.uuid4().hex[:8]}"
    with delayed_proxy(PRIMARY, 1.0) as port:
        limiter = aio.RateLimiter(dsn(port, db.name, application_name=app), name,
                                  max_burst=5, count_per_period=10, period=60)

        async def try_once() -> None:
            with contextlib.suppress(pg_distlock.DistlockError):
                await limiter.try_acquire()

        task = asyncio.ensure_future(try_once())
        await asyncio.sleep(0.3)
        await limiter.close()
        await asyncio.wait_for(task, 10)
        await asyncio.sleep(0.3)
        left = sessions_named(db, app)
        try:
            assert left == 0, f"{left} connection(s) of the limiter open after close() returned"
        finally:
            await limiter.close()


# -- R43-B2. Concurrent first calls each open a connection at once


def test_threads_making_their_first_call_at_once_share_one_connect(db: Db, name: str) -> None:
    """Eight threads of a web server make their first call on one RateLimiter
    of a conninfo at once (start-up, or every thread after a failover). Each
    now opens a connection of its own and all but one are closed again: a
    burst of N backends, which runs into the role's CONNECTION LIMIT (or
    max_connections, taking slots other applications need) and raises
    Unavailable ("too many connections for role") in calls that one shared
    connect would have served. Before 325cd22 they waited for the one connect."""
    role = f"r43_limited_{uuid.uuid4().hex[:6]}"
    db.admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 1")
    db.admin.execute("SELECT distlock.grant_capability(%s, 'worker')", (role,))
    errors: list[BaseException] = []
    try:
        with delayed_proxy(PRIMARY, 0.5) as port:
            limiter = pg_distlock.RateLimiter(dsn(port, db.name, user=role), name,
                                              max_burst=100, count_per_period=100, period=60)
            start = threading.Barrier(8)

            def first_call() -> None:
                start.wait()
                try:
                    limiter.try_acquire()
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=first_call, daemon=True) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(15)
            limiter.close()
        assert not errors, f"{len(errors)} of 8 first calls failed: {errors[0]!r}"
    finally:
        db.admin.execute(f"SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE usename = '{role}'")
        db.admin.execute("SELECT distlock.revoke_capability(%s, 'worker')", (role,))
        db.admin.execute(f"DROP OWNED BY {role}")
        db.admin.execute(f"DROP ROLE {role}")
