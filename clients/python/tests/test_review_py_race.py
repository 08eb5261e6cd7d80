"""Review (helper-61) of 468ae8a (a bounded connect races a multi-host conninfo's
hosts) and 3da5f30 (pools remembered as served). Each test failed on 468ae8a. (Its
service-file test, hosts libpq alone knows of, stays on branch review-py-race: a
documented limit, README "hosts named only in a service file".)"""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
import uuid
import warnings
from typing import Any, Iterator

import psycopg
import pytest

import pg_distlock
import pg_distlock.aio
from pg_distlock import bounded_connect
from pg_distlock.bounded_connect import connect_within, connect_within_async
from conftest import PRIMARY, drop_database, new_database
from test_bounded_connect import GatedProxy, sessions, two_hosts


def silent_listener(address: str = "127.0.0.1", port: int = 0) -> socket.socket:
    """A server that accepts TCP connections and never answers."""
    s = socket.socket()
    s.bind((address, port))
    s.listen(64)
    return s


def refused_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


@pytest.fixture
def silent() -> Iterator[socket.socket]:
    s = silent_listener()
    yield s
    s.close()


def connect(flavour: str, conninfo: str, timeout: float, **kwargs: Any) -> int:
    """The port connected to by a bounded connect (the connection closed)."""
    if flavour == "sync":
        with connect_within(conninfo, {"autocommit": True, **kwargs}, timeout) as conn:
            return int(conn.info.port)

    async def run() -> int:
        conn = await connect_within_async(conninfo, {"autocommit": True, **kwargs}, timeout)
        try:
            return int(conn.info.port)
        finally:
            await conn.close()

    return asyncio.run(run())


# --- asyncio: the winner is dropped unclosed when the caller is cancelled while losers are abandoned ---


async def test_the_winner_is_closed_when_the_callers_task_is_cancelled_while_the_losers_are_abandoned(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """async_race picks the winner, then `finally: await abandon(running)`
    awaits the cancelled losers (and closes late ones). A cancel of the
    caller's task arriving in that window (its asyncio.timeout() expiring,
    a TaskGroup sibling failing) raises CancelledError out of the gather: the
    winner, already connected, is neither returned nor closed. Its session
    stays open for as long as anything holds the CancelledError (its
    traceback holds the race's frame), and is otherwise closed only by the
    garbage collector (psycopg's ResourceWarning "deleted while still open").
    The same holds for a loser that connected meanwhile. Here the cancel is
    delivered exactly in that window (abandon wrapped): the window is a loop
    iteration or two, plus each late loser's close()."""
    gated = GatedProxy(PRIMARY)  # host 1 silent: host 2 wins at half the bound, host 1's attempt is abandoned
    name = f"rvpy-cancel-{uuid.uuid4().hex[:8]}"
    real_abandon = bounded_connect.abandon

    async def abandon_while_cancelled(tasks: list[Any]) -> None:
        task = asyncio.current_task()
        assert task is not None
        task.cancel()  # the caller's deadline fires now
        await real_abandon(tasks)

    monkeypatch.setattr(bounded_connect, "abandon", abandon_while_cancelled)
    kept: BaseException | None = None
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            try:
                conn = await connect_within_async(two_hosts(gated.port, PRIMARY, name), {"autocommit": True}, 1)
                await conn.close()
            except asyncio.CancelledError as exc:
                kept = exc  # an error reporter, a log record, a retry wrapper keeping the last error
            monkeypatch.setattr(bounded_connect, "abandon", real_abandon)
            open_sessions = sessions(name)
            kept = None
            gc.collect()
    finally:
        gated.close()
    unclosed = [str(w.message) for w in caught if "deleted while still open" in str(w.message)]
    assert open_sessions == 0 and not unclosed, (
        f"the connect's winner was left open ({open_sessions} session(s) while the CancelledError was held),"
        f" closed only by the garbage collector: {unclosed}")


# --- a bound near 0: a refused first host ends the connect without trying the healthy second ---


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_refused_first_host_does_not_keep_a_connect_with_a_tiny_bound_from_the_second(flavour: str) -> None:
    """may_start() lets a next attempt start only while `now < by`, even when
    every attempt started has failed. With what is left of a bound near 0
    (time_left() gives a connect down to 0.001 s: the end of a call's wait, a
    shared connection found broken late in a call) the first host's refusal
    (a millisecond) ends the connect: the healthy second host is never tried,
    although the call may take libpq's least 2 s anyway (ends_by) and
    psycopg's own connect would have reached it at once. README: "each next
    host when those tried have all failed"."""
    conninfo = two_hosts(refused_port(), PRIMARY, "rvpy-tiny")
    try:
        port = connect(flavour, conninfo, 0.001)
    except psycopg.OperationalError as exc:
        pytest.fail(f"a bound of 1 ms with host 1 down never tried host 2: {exc}")
    assert port == PRIMARY


# --- a host name with several addresses is several attempts (the README says one host) ---


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_host_name_with_several_addresses_is_one_host_of_the_even_share(flavour: str,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """README and the module say "a host name with several addresses is one
    host here: libpq tries its addresses in turn". psycopg (3.3, sync and
    asyncio) resolves each host name in conninfo_attempts() and makes one
    attempt per address, so the bound's even share is split per address:
    with host=db1,db2 and db1 resolving to two silent addresses, db2 starts
    at 2/3 of the bound instead of 1/2 (with a name behind five addresses, at
    5/6), and the error lists addresses, not hosts."""
    first, second = silent_listener("127.0.0.2"), None
    port = int(first.getsockname()[1])
    second = silent_listener("127.0.0.3", port)
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == "db1.rvpy.test":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))
                    for address in ("127.0.0.2", "127.0.0.3")]
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    conninfo = f"host=db1.rvpy.test,127.0.0.1 port={port},{PRIMARY} user=postgres dbname=postgres"
    try:
        started = time.monotonic()
        reached = connect(flavour, conninfo, 3)
        took = time.monotonic() - started
    finally:
        first.close()
        second.close()
    assert reached == PRIMARY
    assert took < 1.5 + 0.3, f"db2 should start at half of a 3 s bound (two hosts), reached after {took:.2f} s"


# --- a connect_timeout of the user's own ---


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_conninfo_with_its_own_connect_timeout_still_ends_within_the_bound(flavour: str) -> None:
    """README: "a call ends within its bound, or 2 s when that is shorter"
    (the old text's exception, "or the conninfo's own, for each host", was
    dropped). BoundedAttempts sets ends_by = started + the conninfo's
    connect_timeout when that is longer than the bound, and each attempt
    gets it: acquire(wait=1) over two silent hosts with the common
    connect_timeout=10 in the conninfo takes 10 s."""
    silents = [silent_listener(), silent_listener()]
    ports = [int(s.getsockname()[1]) for s in silents]
    conninfo = (f"host=127.0.0.1,127.0.0.1 port={ports[0]},{ports[1]} user=postgres dbname=postgres"
                " connect_timeout=10")
    started = time.monotonic()
    try:
        with pytest.raises(pg_distlock.Unavailable):
            if flavour == "sync":
                pg_distlock.Lease(conninfo, "rvpy-own-timeout", ttl=30, wait=1).acquire()
            else:
                asyncio.run(pg_distlock.aio.Lease(conninfo, "rvpy-own-timeout", ttl=30, wait=1).acquire())
        took = time.monotonic() - started
    finally:
        for s in silents:
            s.close()
    assert took < 2 + 0.6, f"acquire(wait=1) took {took:.2f} s (the conninfo's connect_timeout=10)"


def test_a_losing_attempts_thread_and_socket_do_not_outlive_the_connect(silent: socket.socket) -> None:
    """Sync: the losers are "dropped" only in that nobody waits for them:
    each keeps its daemon thread and socket until its own connect_timeout.
    With the conninfo's connect_timeout=0 (libpq: wait forever; psycopg: its
    default 130 s) ends_by counts it as 2 s, but the silent host's attempt
    runs 130 s after every connect that the healthy second host won: a
    thread and a socket per new connection, piling up while db1 is
    partitioned (and without a connect_timeout of its own, one per connect
    for up to the whole bound, e.g. 30 s for wait=30)."""
    conninfo = two_hosts(int(silent.getsockname()[1]), PRIMARY, "rvpy-linger") + " connect_timeout=0"

    def attempts() -> int:
        return sum(1 for t in threading.enumerate() if t.name == "pg_distlock-connect" and t.is_alive())

    before = attempts()
    for _ in range(3):
        with connect_within(conninfo, {"autocommit": True}, 1) as conn:
            assert conn.info.port == PRIMARY
    deadline = time.monotonic() + 4
    while attempts() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert attempts() == before, (
        f"{attempts() - before} attempt thread(s) still connecting to the silent host 4 s after the connects"
        " returned (each until psycopg's 130 s)")


# --- error classification (both not new in 468ae8a: conninfo_attempts raises before libpq words it) ---


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_host_name_that_does_not_resolve_is_misconfigured(flavour: str) -> None:
    """README: Misconfigured for "no server where the conninfo points" before
    a first success. psycopg 3.3 resolves host names itself
    (conninfo_attempts, in both flavours), so a typo in the host name fails
    with psycopg's words, "failed to resolve host 'x': [Errno -2] Name or
    service not known", not libpq's "could not translate host name" that
    connect_errors matches: Unavailable, retried for ever, and Client()
    only logs it as "not now"."""
    conninfo = "host=no-such-host.invalid user=postgres dbname=postgres"
    with pytest.raises(pg_distlock.DistlockError) as raised:
        if flavour == "sync":
            pg_distlock.Lease(conninfo, "rvpy-dns", ttl=30, wait=1).acquire()
        else:
            asyncio.run(pg_distlock.aio.Lease(conninfo, "rvpy-dns", ttl=30, wait=1).acquire())
    assert isinstance(raised.value, pg_distlock.Misconfigured), f"{type(raised.value).__name__}: {raised.value}"


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
def test_a_conninfo_with_more_ports_than_hosts_is_misconfigured(flavour: str) -> None:
    """A conninfo that cannot work ("could not match 3 port numbers to 2
    hosts", raised by psycopg's split_attempts before any connect) is
    Unavailable, retried for ever."""
    conninfo = f"host=127.0.0.1,127.0.0.1 port={PRIMARY},{PRIMARY},{PRIMARY} user=postgres dbname=postgres"
    with pytest.raises(pg_distlock.DistlockError) as raised:
        if flavour == "sync":
            pg_distlock.Lease(conninfo, "rvpy-ports", ttl=30, wait=1).acquire()
        else:
            asyncio.run(pg_distlock.aio.Lease(conninfo, "rvpy-ports", ttl=30, wait=1).acquire())
    assert isinstance(raised.value, pg_distlock.Misconfigured), f"{type(raised.value).__name__}: {raised.value}"
