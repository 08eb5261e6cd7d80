"""Final review (helper-59) of the Job.queue change and the client's bounds: a consumer on the
application's own connection across the update (failed on 90b6a93), and a pool whose statistics an
exporter popped (failed on 265698e), and a failover conninfo whose first host is silent (failed on 265698e)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from typing import Iterator

import psycopg
import pytest

import pg_distlock
import pg_distlock.aio
from conftest import PRIMARY, Db, drop_database, dsn, new_database


@pytest.fixture
def db_0_3_0() -> Iterator[Db]:
    db = new_database(version="0.3.0")
    yield db
    drop_database(db)


@pytest.mark.parametrize("batch", [1, 2])
def test_an_applications_connection_with_prepared_statements_keeps_consuming_across_the_update(
    db_0_3_0: Db, batch: int
) -> None:
    """The application's own connection, with psycopg's default automatic
    prepared statements (prepare_threshold=5), or a psycopg_pool's. The
    docs (upgrading.md) say the client "prepares nothing": it does on such a
    connection.
    The claim statements became `SELECT * FROM distlock.consume_task(...)`:
    after ALTER EXTENSION pg_distlock UPDATE the prepared statement's result
    gains `queue`, and the server refuses to run it again ("cached plan must
    not change result type", 0A000) on every consume of that connection for
    as long as it lives. 0.3.0's client named its 8 columns, which a
    re-planned statement still returns."""
    db = db_0_3_0
    conn = psycopg.connect(db.dsn, autocommit=True)  # psycopg's default prepare_threshold (5)
    try:
        consumer = pg_distlock.Queue(conn, worker_id="c1", queues=["email"])
        producer = pg_distlock.Queue(db.dsn)

        def claim() -> list[pg_distlock.Job]:
            return consumer.consume(batch)

        for _ in range(7):
            producer.enqueue("mail", queue="email")
            assert len(claim()) == 1  # prepared on this connection at 0.3.0's SQL (from the 6th)
        db.admin.execute("ALTER EXTENSION pg_distlock UPDATE")
        email = producer.enqueue("mail", queue="email")
        try:
            jobs = claim()
        except Exception as exc:  # noqa: BLE001
            pytest.fail(f"consume({batch}) on the application's connection after the update: {exc!r}")
        assert [(j.id, j.queue) for j in jobs] == [(email, "email")]
    finally:
        conn.close()


class ClosableProxy:
    """A TCP proxy to 127.0.0.1:`upstream`; stop() closes it and every
    connection through it (a server that went down: later connects are
    refused)."""

    def __init__(self, upstream: int) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._accept, args=(upstream,), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def _accept(self, upstream: int) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                server = socket.create_connection(("127.0.0.1", upstream))
                self.socks += [client, server]
                threading.Thread(target=self._pump, args=(client, server), daemon=True).start()
                threading.Thread(target=self._pump, args=(server, client), daemon=True).start()

    def stop(self) -> None:
        for s in [self.listener, *self.socks]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def test_a_pool_whose_stats_were_popped_is_unavailable_not_misconfigured_when_its_server_goes_down() -> None:
    """pool_connected_once now reads connections_num - connections_errors.
    An application that exports psycopg_pool's metrics with pop_stats()
    (which resets both counters) after the pool connected, then loses the
    server (a restart, a failover): each failed reconnect adds one to both,
    the difference is 0, and the client calls a pool that served for hours
    Misconfigured ("check the conninfo's host and port"), the error that
    says retrying cannot help. Before this change (connections_num > 0) it
    was Unavailable."""
    from psycopg_pool import ConnectionPool

    db = new_database()
    proxy = ClosableProxy(PRIMARY)
    pool = ConnectionPool(dsn(proxy.port, db.name), min_size=1, max_size=1, timeout=1, open=True,
                          kwargs={"autocommit": True})
    try:
        pool.wait(timeout=10)
        held = pg_distlock.Client(pool).lease("rfinal-popped", ttl=30, wait=0)
        held.acquire()
        held.release()
        pool.pop_stats()  # a metrics exporter's read
        proxy.stop()
        pool.check()  # the broken connection found; reconnects begin and are refused
        deadline = time.monotonic() + 15
        while not pool.get_stats().get("connections_errors", 0):
            assert time.monotonic() < deadline, "the pool never failed to reconnect"
            time.sleep(0.05)
        with pytest.raises(pg_distlock.DistlockError) as raised:
            pg_distlock.Client(pool).lease("rfinal-popped", ttl=30, wait=0).acquire()
    finally:
        pool.close(timeout=0)
        drop_database(db)
    assert not isinstance(raised.value, pg_distlock.Misconfigured), f"{type(raised.value).__name__}: {raised.value}"
    assert isinstance(raised.value, pg_distlock.Unavailable), f"{type(raised.value).__name__}: {raised.value}"


async def test_an_asyncio_pool_whose_stats_were_popped_is_unavailable_not_misconfigured_when_its_server_goes_down(
) -> None:
    """The asyncio client's reading of the same pool (pool_connected_once)."""
    from psycopg_pool import AsyncConnectionPool

    db = new_database()
    proxy = ClosableProxy(PRIMARY)
    pool = AsyncConnectionPool(dsn(proxy.port, db.name), min_size=1, max_size=1, timeout=1, open=False,
                               kwargs={"autocommit": True})
    await pool.open(wait=True, timeout=10)
    try:
        held = pg_distlock.aio.Client(pool).lease("rfinal-popped-aio", ttl=30, wait=0)
        await held.acquire()
        await held.release()
        pool.pop_stats()
        proxy.stop()
        await pool.check()
        deadline = time.monotonic() + 15
        while not pool.get_stats().get("connections_errors", 0):
            assert time.monotonic() < deadline, "the pool never failed to reconnect"
            await asyncio.sleep(0.05)
        with pytest.raises(pg_distlock.DistlockError) as raised:
            await pg_distlock.aio.Client(pool).lease("rfinal-popped-aio", ttl=30, wait=0).acquire()
    finally:
        await pool.close(timeout=0)
        drop_database(db)
    assert not isinstance(raised.value, pg_distlock.Misconfigured), f"{type(raised.value).__name__}: {raised.value}"
    assert isinstance(raised.value, pg_distlock.Unavailable), f"{type(raised.value).__name__}: {raised.value}"
@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_healthy_second_host_is_reached_while_the_first_does_not_answer(flavour: str) -> None:
    """The README's failover conninfo (host=db1,db2 ...
    target_session_attrs=read-write) with db1 partitioned (accepts TCP, never
    answers) and db2 the healthy primary. bounded_connect gives db1 libpq's
    least 2 s, then finds the bound of acquire(wait=1) spent and never tries
    db2: every acquire fails with Unavailable for as long as db1 is silent.
    psycopg's own connect (before this change, connect_timeout 2 per host)
    reached db2 after 2 s. The module's docstring promises "a silent first
    host does not keep a healthy later one from being tried"."""
    from pg_distlock import aio

    db = new_database()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(16)
    conninfo = (f"host=127.0.0.1,127.0.0.1 port={silent.getsockname()[1]},{PRIMARY} user=postgres"
                f" dbname={db.name} target_session_attrs=read-write")
    try:
        if flavour == "sync":
            lease = pg_distlock.Lease(conninfo, "rfinal-failover", ttl=30, wait=1)
            try:
                lease.acquire()
            except pg_distlock.Unavailable as exc:
                pytest.fail(f"acquire(wait=1) with db2 healthy: {exc!r}")
            lease.release()
        else:
            async def run() -> None:
                lease = aio.Lease(conninfo, "rfinal-failover", ttl=30, wait=1)
                try:
                    await lease.acquire()
                except pg_distlock.Unavailable as exc:
                    pytest.fail(f"asyncio acquire(wait=1) with db2 healthy: {exc!r}")
                await lease.release()

            asyncio.run(run())
    finally:
        silent.close()
        drop_database(db)
