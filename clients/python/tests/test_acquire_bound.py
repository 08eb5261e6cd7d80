"""The wait of a lease's, a semaphore's or a rate limiter's acquire also bounds
getting a connection (issue 47, item 1), as a lock call's timeout does: behind
a pool with none to give, acquire(wait=1) raises Unavailable in about a
second, naming the cause, instead of waiting the pool's own 30 s. Renewals of
a hold already taken are not bounded by it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import subprocess
import sys
import threading
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Iterator

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

import pg_distlock
from pg_distlock import aio
from conftest import Db, PRIMARY, dsn, eventually
from test_review_47 import FakeServer

KINDS = ["lease", "semaphore", "rate_limiter"]
BOUND = 2.0
"""Seconds an acquire with a wait of at most 1 s may take on a pool that
cannot give a connection: the wait (at least 1 s for the checkout), then a
probe that is refused at once."""


def hold(kind: str, client: Any, name: str, wait: float | None, **options: Any) -> tuple[Any, Callable[[], Any]]:
    """A hold of `kind` made by `client`, and its acquire with `wait`
    (a rate limiter's timeout), for either flavour."""
    if kind == "lease":
        made = client.lease(name, ttl=30, wait=wait, **options)
        return made, made.acquire
    if kind == "semaphore":
        made = client.semaphore(name, 2, ttl=30, wait=wait, **options)
        return made, made.acquire
    made = client.rate_limiter(name, max_burst=5, count_per_period=10, period=60)
    return made, lambda: made.acquire(timeout=wait)


@contextlib.contextmanager
def all_taken(pool: ConnectionPool[Any]) -> Iterator[None]:
    """Every connection of `pool` checked out by the test."""
    conns = [pool.getconn(timeout=10) for _ in range(pool.max_size)]
    try:
        yield
    finally:
        for conn in conns:
            pool.putconn(conn)


@contextlib.asynccontextmanager
async def all_taken_async(pool: AsyncConnectionPool[Any]) -> AsyncIterator[None]:
    conns = [await pool.getconn(timeout=10) for _ in range(pool.max_size)]
    try:
        yield
    finally:
        for conn in conns:
            await pool.putconn(conn)


def timed(call: Callable[[], Any]) -> tuple[float, BaseException]:
    started = time.monotonic()
    with pytest.raises(pg_distlock.Unavailable) as raised:
        call()
    return time.monotonic() - started, raised.value


async def timed_async(call: Callable[[], Awaitable[Any]]) -> tuple[float, BaseException]:
    started = time.monotonic()
    with pytest.raises(pg_distlock.Unavailable) as raised:
        await call()
    return time.monotonic() - started, raised.value


def assert_busy(took: float, error: BaseException) -> None:
    assert 0.8 < took < BOUND, f"{took:.1f} s"
    assert "every connection of the pool is in use" in str(error), error
    assert isinstance(error.__cause__, PoolTimeout), error.__cause__


# -- A pool whose connections the test holds


@pytest.mark.parametrize("wait", [0, 1])
@pytest.mark.parametrize("kind", KINDS)
def test_an_acquire_on_an_exhausted_pool_ends_within_its_wait(db: Db, name: str, kind: str, wait: float) -> None:
    """wait=0 (try once) gets the same least second for the checkout as
    lock(timeout=0)."""
    with pg_distlock.Client(db.dsn, min_size=1, max_size=1) as client:
        client.pool.wait()
        _, acquire = hold(kind, client, name, wait)
        with all_taken(client.pool):
            took, error = timed(acquire)
        assert_busy(took, error)
        acquire()  # the pool has its connection back


@pytest.mark.parametrize("wait", [0, 1])
@pytest.mark.parametrize("kind", KINDS)
async def test_an_asyncio_acquire_on_an_exhausted_pool_ends_within_its_wait(
        db: Db, name: str, kind: str, wait: float) -> None:
    async with aio.Client(db.dsn, min_size=1, max_size=1) as client:
        await client.pool.wait()
        _, acquire = hold(kind, client, name, wait)
        async with all_taken_async(client.pool):
            took, error = await timed_async(acquire)
        assert_busy(took, error)
        await acquire()


def test_a_rate_limiter_without_a_timeout_waits_the_pools_own_timeout(db: Db, name: str) -> None:
    """timeout=None (wait as long as it takes) keeps the pool's own limit
    (and its own message)."""
    with ConnectionPool(db.dsn, min_size=1, max_size=1, timeout=3, open=True) as pool:
        pool.wait()
        _, acquire = hold("rate_limiter", pg_distlock.Client(pool), name, None)
        with all_taken(pool):
            took, error = timed(acquire)
    assert 2.8 < took < 3 + BOUND, f"{took:.1f} s"
    assert "couldn't get a connection after 3.00 sec" in str(error), error


# -- A pool whose server went away after a first success


def cut_off(db: Db, proxy: FakeServer) -> None:
    """Nothing listens on the pool's port any more, and the connections it
    had are ended. (Closed alone, the listener goes on accepting in the
    thread blocked in accept().)"""
    proxy.listener.shutdown(socket.SHUT_RDWR)
    proxy.close()
    db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'acquire-bound'")


def assert_refused(outcomes: list[tuple[float, BaseException]]) -> None:
    """The first calls may get the pool's connections, dead since (each
    raises at once); then the pool has none to give."""
    took, error = outcomes[-1]
    assert "Connection refused" in str(error), outcomes
    assert took < BOUND, f"{took:.1f} s"
    assert isinstance(error.__cause__, psycopg.OperationalError), error.__cause__
    assert "Connection refused" in str(error.__cause__), error.__cause__


@pytest.mark.parametrize("kind", KINDS)
def test_an_acquire_behind_a_pool_whose_server_went_away_ends_within_its_wait(db: Db, name: str, kind: str) -> None:
    proxy = FakeServer(PRIMARY, None)
    with ConnectionPool(dsn(proxy.port, db.name, application_name="acquire-bound"), min_size=1, max_size=2,
                        kwargs={"autocommit": True}, open=True) as pool:
        pool.wait()
        client = pg_distlock.Client(pool)
        first, acquire = hold(kind, client, name, 1)
        acquire()
        first.close()
        cut_off(db, proxy)
        outcomes: list[tuple[float, BaseException]] = []
        while len(outcomes) < 4 and not (outcomes and "refused" in str(outcomes[-1][1])):
            outcomes.append(timed(acquire))
            assert outcomes[-1][0] < BOUND, outcomes
    assert_refused(outcomes)


@pytest.mark.parametrize("kind", KINDS)
async def test_an_asyncio_acquire_behind_a_pool_whose_server_went_away_ends_within_its_wait(
        db: Db, name: str, kind: str) -> None:
    proxy = FakeServer(PRIMARY, None)
    pool = AsyncConnectionPool(dsn(proxy.port, db.name, application_name="acquire-bound"), min_size=1, max_size=2,
                               kwargs={"autocommit": True}, open=False)
    await pool.open(wait=True)
    try:
        client = aio.Client(pool)
        first, acquire = hold(kind, client, name, 1)
        await acquire()
        await first.close()
        cut_off(db, proxy)
        outcomes: list[tuple[float, BaseException]] = []
        while len(outcomes) < 4 and not (outcomes and "refused" in str(outcomes[-1][1])):
            outcomes.append(await timed_async(acquire))
            assert outcomes[-1][0] < BOUND, outcomes
    finally:
        await pool.close()
    assert_refused(outcomes)


# -- A conninfo source whose server accepts TCP but does not answer


@contextlib.contextmanager
def silent_server() -> Iterator[str]:
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    try:
        yield dsn(int(hung.getsockname()[1]), "x")
    finally:
        hung.close()


def make(kind: str, flavour: Any, source: str, name: str) -> tuple[Any, Callable[[], Any]]:
    if kind == "lease":
        made = flavour.Lease(source, name, ttl=30, wait=1)
        return made, made.acquire
    if kind == "semaphore":
        made = flavour.Semaphore(source, name, 2, ttl=30, wait=1)
        return made, made.acquire
    made = flavour.RateLimiter(source, name, max_burst=5, count_per_period=10, period=60)
    return made, lambda: made.acquire(timeout=1)


@pytest.mark.parametrize("kind", KINDS)
def test_an_acquire_on_a_conninfo_whose_server_does_not_answer_ends_within_its_wait(name: str, kind: str) -> None:
    """A new connection gets libpq's connect_timeout, in whole seconds and at
    least 2 (as for a lock call); it had none, and waited psycopg's 130 s."""
    outcome: list[tuple[float, BaseException]] = []
    with silent_server() as conninfo:
        _, acquire = make(kind, pg_distlock, conninfo, name)
        thread = threading.Thread(target=lambda: outcome.append(timed(acquire)), daemon=True)
        thread.start()
        thread.join(10)
    assert outcome, "still waiting after 10 s"
    took, error = outcome[0]
    assert took < 2 + BOUND, f"{took:.1f} s"
    assert "timeout expired" in str(error), error


@pytest.mark.parametrize("kind", KINDS)
async def test_an_asyncio_acquire_on_a_conninfo_whose_server_does_not_answer_ends_within_its_wait(
        name: str, kind: str) -> None:
    with silent_server() as conninfo:
        _, acquire = make(kind, aio, conninfo, name)
        took, error = await asyncio.wait_for(timed_async(acquire), 10)
    assert took < 2 + BOUND, f"{took:.1f} s"
    assert "timeout expired" in str(error), error


# -- Attacks on the bound (shared/REVIEW.md): renewals, cancellation, Ctrl-C


async def eventually_async(check: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)


def waiting_for(pool: Any) -> Callable[[], bool]:
    return lambda: pool.get_stats().get("requests_waiting", 0) >= 1


# Longer than an acquire's least bound of 1 s: the duration under test, not
# a wait for something to happen.
PAST_THE_BOUND = 1.5


@contextlib.contextmanager
def renewals_of(name: str, caplog: pytest.LogCaptureFixture) -> Iterator[list[object]]:
    """The renewals of `name` reported meanwhile; no renewal may fail."""
    renewed: list[object] = []
    remove = pg_distlock.add_telemetry_hook(
        lambda event: renewed.append(event) if event.kind == "renewed" and event.name == name else None)
    try:
        with caplog.at_level(logging.INFO, logger="pg_distlock"):
            yield renewed
    finally:
        remove()
    failed = [r.getMessage() for r in caplog.records if "renewing" in r.getMessage()]
    assert not failed, failed


@pytest.mark.parametrize("kind", ["lease", "semaphore"])
def test_a_renewal_waits_for_a_busy_pool_past_the_acquires_bound(
        db: Db, name: str, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """Only acquire's attempts are bounded: a renewal waits for the pool as
    it did (the hold ends only when its TTL passes unconfirmed), or a pool
    busy for a second would log failed renewals and, with a short TTL, lose
    the hold. (A semaphore's attempt and its renewal are one statement.)"""
    with pg_distlock.Client(db.dsn, min_size=1, max_size=1) as client, renewals_of(name, caplog) as renewed:
        made, acquire = hold(kind, client, name, 0, renew_every=0.2)
        acquire()
        with all_taken(client.pool):
            eventually(waiting_for(client.pool), what="a renewal waiting for the pool")
            time.sleep(PAST_THE_BOUND)
            before = len(renewed)
        eventually(lambda: len(renewed) > before, what="the renewal that waited")
        assert made.held and not made.lost.is_set()


@pytest.mark.parametrize("kind", ["lease", "semaphore"])
async def test_an_asyncio_renewal_waits_for_a_busy_pool_past_the_acquires_bound(
        db: Db, name: str, kind: str, caplog: pytest.LogCaptureFixture) -> None:
    with renewals_of(name, caplog) as renewed:
        async with aio.Client(db.dsn, min_size=1, max_size=1) as client:
            made, acquire = hold(kind, client, name, 0, renew_every=0.2)
            await acquire()
            async with all_taken_async(client.pool):
                await eventually_async(waiting_for(client.pool), what="a renewal waiting for the pool")
                await asyncio.sleep(PAST_THE_BOUND)
                before = len(renewed)
            await eventually_async(lambda: len(renewed) > before, what="the renewal that waited")
            assert made.held and not made.lost.is_set()


@pytest.mark.parametrize("kind", KINDS)
async def test_an_acquire_cancelled_while_it_waits_for_the_pool_leaves_the_pool_whole(
        db: Db, name: str, kind: str) -> None:
    """asyncio.wait_for() or a task's cancel() during the checkout: the
    object holds nothing and can acquire again, and the pool's one
    connection is handed out again (not lost to the cancelled waiter)."""
    async with aio.Client(db.dsn, min_size=1, max_size=1) as client:
        await client.pool.wait()
        made, acquire = hold(kind, client, name, 5)
        async with all_taken_async(client.pool):
            waiting = asyncio.ensure_future(acquire())
            await eventually_async(waiting_for(client.pool), what="the acquire waiting for the pool")
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
        assert not getattr(made, "held", False)
        await asyncio.wait_for(acquire(), 5)
        assert client.pool.get_stats()["pool_size"] == 1


CTRL_C_CHILD = r"""
import signal, sys, threading, time
from psycopg_pool import ConnectionPool
import pg_distlock

# A background job's children start with SIGINT ignored.
signal.signal(signal.SIGINT, signal.default_int_handler)
conninfo, name, kind = sys.argv[1:4]
pool = ConnectionPool(conninfo, min_size=2, max_size=2, kwargs={"autocommit": True}, open=True)
pool.wait()
client = pg_distlock.Client(pool)
if kind == "lease":
    made = client.lease(name, ttl=30, wait=30); acquire = made.acquire
elif kind == "semaphore":
    made = client.semaphore(name, 2, ttl=30, wait=30); acquire = made.acquire
else:
    made = client.rate_limiter(name, max_burst=5, count_per_period=10, period=60)
    acquire = lambda: made.acquire(timeout=30)
taken = [pool.getconn(), pool.getconn()]

def tell():
    deadline = time.monotonic() + 10
    while pool.get_stats().get("requests_waiting", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    print("waiting", flush=True)

threading.Thread(target=tell, daemon=True).start()
try:
    acquire()
    print("acquired while the pool had nothing to give", flush=True)
except KeyboardInterrupt:
    print("interrupted", getattr(made, "held", False), flush=True)
    for conn in taken:
        pool.putconn(conn)
    started = time.monotonic()
    acquire()
    print("again", getattr(made, "held", True), time.monotonic() - started, flush=True)
"""


@pytest.mark.parametrize("kind", KINDS)
def test_ctrl_c_while_an_acquire_waits_for_the_pool_ends_it_at_once(db: Db, name: str, kind: str) -> None:
    """KeyboardInterrupt during the checkout ends acquire() at once, holding
    nothing, and the same object acquires again. (psycopg_pool's blocking
    pool then hands the next connection given back to the interrupted
    waiter, and that connection is lost to the pool: its WaitingClient
    catches Exception only. Hence two connections here.)"""
    import os
    import signal

    child = subprocess.Popen([sys.executable, "-c", CTRL_C_CHILD, db.dsn, name, kind],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "waiting"
        os.kill(child.pid, signal.SIGINT)
        sent = time.monotonic()
        interrupted = child.stdout.readline().split()
        took = time.monotonic() - sent
        out, err = child.communicate(timeout=20)
    finally:
        child.kill()
    assert interrupted == ["interrupted", "False"] and took < 1, (interrupted, took, err)
    words = out.split()
    assert words[:2] == ["again", "True"] and float(words[2]) < 1, (out, err)


# -- Calls that answer at once: try_acquire and throttle take a timeout for their connection


def one_try(client: Any, name: str, how: str, timeout: float | None) -> Callable[[], Any]:
    if how == "try_acquire":
        limiter = client.rate_limiter(name, max_burst=5, count_per_period=10, period=60)
        return lambda: limiter.try_acquire(timeout=timeout)
    return lambda: client.throttle(name, 5, 10, 60, timeout=timeout)


@pytest.mark.parametrize("how", ["try_acquire", "throttle"])
def test_a_try_on_an_exhausted_pool_ends_within_its_timeout(db: Db, name: str, how: str) -> None:
    with pg_distlock.Client(db.dsn, min_size=1, max_size=1) as client:
        client.pool.wait()
        call = one_try(client, name, how, 1)
        with all_taken(client.pool):
            took, error = timed(call)
        assert_busy(took, error)
        assert call().allowed  # the pool has its connection back


@pytest.mark.parametrize("how", ["try_acquire", "throttle"])
async def test_an_asyncio_try_on_an_exhausted_pool_ends_within_its_timeout(db: Db, name: str, how: str) -> None:
    async with aio.Client(db.dsn, min_size=1, max_size=1) as client:
        await client.pool.wait()
        call = one_try(client, name, how, 1)
        async with all_taken_async(client.pool):
            took, error = await timed_async(call)
        assert_busy(took, error)
        assert (await call()).allowed


def test_a_try_without_a_timeout_waits_the_pools_own_timeout(db: Db, name: str) -> None:
    with ConnectionPool(db.dsn, min_size=1, max_size=1, timeout=3, open=True) as pool:
        pool.wait()
        call = one_try(pg_distlock.Client(pool), name, "throttle", None)
        with all_taken(pool):
            took, error = timed(call)
    assert 2.8 < took < 3 + BOUND, f"{took:.1f} s"
    assert "couldn't get a connection after 3.00 sec" in str(error), error
