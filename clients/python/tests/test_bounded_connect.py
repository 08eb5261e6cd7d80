"""A bounded connect over a multi-host conninfo (bounded_connect): staggered
attempts within the bound, the first to connect wins, late ones are closed,
and the hosts' order is kept when the first answers in time."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
import uuid
from typing import Any, Iterator

import psycopg
import pytest

from pg_distlock.bounded_connect import connect_within, connect_within_async
from conftest import PRIMARY, dsn, eventually


class GatedProxy:
    """A loopback endpoint that accepts connections and forwards them to
    `target` only once `gate` is set (until then, a silent server)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.gate = threading.Event()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = int(self.listener.getsockname()[1])
        self.socks: list[socket.socket] = []
        self.finished = 0  # forwarded connections whose client side ended
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            self.socks.append(client)
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self.gate.wait()
        with contextlib.suppress(OSError):
            server = socket.create_connection(("127.0.0.1", self.target))
            self.socks.append(server)
            threading.Thread(target=self._pump, args=(server, client), daemon=True).start()
            self._pump(client, server)
        self.finished += 1

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self.gate.set()
        for s in [self.listener, *self.socks]:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


@pytest.fixture
def gated() -> Iterator[GatedProxy]:
    proxy = GatedProxy(PRIMARY)
    yield proxy
    proxy.close()


def two_hosts(first: int, second: int, application_name: str) -> str:
    return (f"host=127.0.0.1,127.0.0.1 port={first},{second} user=postgres dbname=postgres"
            f" application_name={application_name}")


def sessions(application_name: str) -> int:
    with psycopg.connect(dsn(PRIMARY, "postgres"), autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                           (application_name,)).fetchone()
        assert row is not None
        return int(row[0])


def connect(flavour: str, conninfo: str, timeout: float) -> Any:
    if flavour == "sync":
        return connect_within(conninfo, {"autocommit": True}, timeout)

    async def run() -> Any:
        conn = await connect_within_async(conninfo, {"autocommit": True}, timeout)
        port = conn.info.port
        await conn.close()
        return port

    return asyncio.run(run())


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_the_second_host_wins_while_the_first_is_silent_and_the_first_late_connection_is_closed(
        gated: GatedProxy, flavour: str) -> None:
    name = f"bc-late-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    conn = connect(flavour, two_hosts(gated.port, PRIMARY, name), timeout=1)
    took = time.monotonic() - started
    port = conn if flavour == "asyncio" else conn.info.port
    assert port == PRIMARY, "the healthy second host was not the one connected"
    assert took < 1.0, f"the second host's attempt should start at half the bound, took {took:.2f} s"
    gated.gate.set()  # the first host answers now: its attempt must not leave a session behind
    try:
        # The late attempt reaches the server through the proxy and hangs up
        # (sync: connected, then closed; asyncio: cancelled before).
        eventually(lambda: gated.finished == 1, timeout=5, what="the late attempt to hang up")
        eventually(lambda: sessions(name) == (1 if flavour == "sync" else 0), timeout=5,
                   what="only the winning session to stay")
    finally:
        if flavour == "sync":
            conn.close()
    eventually(lambda: sessions(name) == 0, timeout=5, what="no session left")


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_two_silent_hosts_are_both_tried_and_the_connect_ends_within_libpqs_least(flavour: str) -> None:
    silent = [socket.socket(), socket.socket()]
    for s in silent:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
    ports = [int(s.getsockname()[1]) for s in silent]
    try:
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError) as raised:
            connect(flavour, two_hosts(ports[0], ports[1], "bc-silent"), timeout=1)
        took = time.monotonic() - started
    finally:
        for s in silent:
            s.close()
    assert took < 2.6, f"a connect bounded by 1 s took {took:.2f} s"
    for port in ports:
        assert f"port: '{port}'" in str(raised.value), f"host on port {port} never tried: {raised.value}"


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_first_host_that_answers_within_its_share_is_the_one_connected(gated: GatedProxy, flavour: str) -> None:
    """Host order is the user's preference: the second host starts only after
    the first had its share of the bound (here 5 s), so a first host that is
    slow but answers (0.3 s) wins."""
    threading.Timer(0.3, gated.gate.set).start()
    conn = connect(flavour, two_hosts(gated.port, PRIMARY, "bc-order"), timeout=10)
    port = conn if flavour == "asyncio" else conn.info.port
    if flavour == "sync":
        conn.close()
    assert port == gated.port
