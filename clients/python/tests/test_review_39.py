"""Review 39 of the Python client's acquire bound (branch py-acquire-bound,
ba2ddef..45bbddd; on main f25f5da..c5855f8): each test is a break the review
found, and failed on 45bbddd (run 2026-11-27 against PostgreSQL 15)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any, Iterator

import pytest

import pg_distlock
from pg_distlock import aio
from conftest import Db
from test_acquire_bound import silent_server


@contextlib.contextmanager
def pool_busy_between(pool: Any, start: float, end: float) -> Iterator[None]:
    """The pool's connections taken by the test from `start` to `end`
    seconds from now, in a thread of its own."""
    def hog() -> None:
        time.sleep(start)
        conns = [pool.getconn(timeout=10) for _ in range(pool.max_size)]
        time.sleep(end - start)
        for conn in conns:
            pool.putconn(conn)

    thread = threading.Thread(target=hog, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join(10)


def held_elsewhere(kind: str, db: Db, name: str) -> Any:
    """The hold `name` taken by another holder (a connection of its own)."""
    if kind == "lease":
        other: Any = pg_distlock.Lease(db.dsn, name, ttl=30)
    else:
        other = pg_distlock.Semaphore(db.dsn, name, 1, ttl=30)
    other.acquire()
    return other


# -- R39-B1. The last try of a contended acquire gets a millisecond for its checkout


@pytest.mark.parametrize("kind", ["lease", "semaphore"])
def test_a_contended_acquire_ends_in_lock_timeout_though_the_pool_is_busy_when_its_wait_ends(
        db: Db, name: str, kind: str) -> None:
    """retry_until computes one checkout_by for every try (start + max(wait,
    1 s)) and, for wait >= 1, makes its last try right at the end of the
    wait (it sleeps `left`): that try's checkout gets time_left()'s floor of
    1 ms. A pool whose connections are all in use for a moment then (any
    busy application) turns the truthful LockTimeout (someone else holds it)
    into Unavailable "every connection of the pool is in use: raise max_size
    or hold fewer at once". The README promises "at least a second is left"
    for getting the connection. Tries here: 0, .02, .06, .14, .30, .62 and
    1.0 s; the pool is busy from 0.7 to 1.3 s."""
    other = held_elsewhere(kind, db, name)
    try:
        with pg_distlock.Client(db.dsn, min_size=1, max_size=1) as client:
            client.pool.wait()
            made = client.lease(name, ttl=30, wait=1) if kind == "lease" else client.semaphore(name, 1, ttl=30, wait=1)
            started = time.monotonic()
            with pool_busy_between(client.pool, 0.7, 1.3):
                try:
                    made.acquire()
                    outcome: BaseException | None = None
                except pg_distlock.DistlockError as exc:
                    outcome = exc
            took = time.monotonic() - started
            assert isinstance(outcome, pg_distlock.LockTimeout), (
                f"{kind} held by another, pool busy for 0.6 s at the end of wait=1: got {outcome!r} after "
                f"{took:.2f} s; the last try's checkout had 1 ms")
    finally:
        other.close()


def test_a_rate_limiters_retry_after_its_sleep_is_not_refused_for_a_pool_busy_for_a_moment(db: Db, name: str) -> None:
    """The same for RateLimiter.acquire(timeout=1): one permit a second, the
    second acquire sleeps the server's retry delay (~0.99 s) and tries again
    with a few milliseconds left for the checkout; the pool is busy from 0.5
    to 1.3 s. Before the change it waited for the pool and was allowed; now
    it raises Unavailable after having waited for the permit (RateLimited or
    allowed are both fine here, Unavailable is not)."""
    with pg_distlock.Client(db.dsn, min_size=1, max_size=1) as client:
        client.pool.wait()
        limiter = client.rate_limiter(name, max_burst=0, count_per_period=1, period=1)
        assert limiter.acquire(timeout=1).allowed
        with pool_busy_between(client.pool, 0.5, 1.3):
            try:
                limiter.acquire(timeout=1)
            except pg_distlock.RateLimited:
                pass
            except pg_distlock.Unavailable as exc:
                pytest.fail(f"the retry after the rate limit's delay got milliseconds for its checkout: {exc!r}")


# -- R39-B2. A conninfo source's connect by another caller holds the acquire past its bound


def test_a_rate_limiters_acquire_ends_within_its_timeout_while_another_thread_connects(name: str) -> None:
    """Runtime._shared_connection connects while holding _shared_lock. A
    RateLimiter of a conninfo, shared by a web server's threads: one calls
    try_acquire() (or acquire() without a timeout), whose connect to a
    server that does not answer has no bound but psycopg's 130 s; another's
    acquire(timeout=1) waits for the lock, not its connect_timeout of 2 s."""
    outcome: list[tuple[float, BaseException | None]] = []
    with silent_server() as conninfo:
        limiter = pg_distlock.RateLimiter(conninfo, name, max_burst=5, count_per_period=10, period=60)
        def try_once() -> None:
            with contextlib.suppress(Exception):
                limiter.try_acquire()

        unbounded = threading.Thread(target=try_once, daemon=True)
        unbounded.start()
        time.sleep(0.3)  # connecting, with the shared connection's lock held

        def bounded() -> None:
            started = time.monotonic()
            try:
                limiter.acquire(timeout=1)
                outcome.append((time.monotonic() - started, None))
            except BaseException as exc:  # noqa: BLE001 - reported below
                outcome.append((time.monotonic() - started, exc))

        thread = threading.Thread(target=bounded, daemon=True)
        thread.start()
        thread.join(8)
        assert outcome, "acquire(timeout=1) still waiting after 8 s (behind another thread's unbounded connect)"
    took, error = outcome[0]
    assert isinstance(error, pg_distlock.Unavailable) and took < 4, (took, error)


async def test_an_asyncio_rate_limiters_acquire_ends_within_its_timeout_while_another_task_connects(
        name: str) -> None:
    with silent_server() as conninfo:
        limiter = aio.RateLimiter(conninfo, name, max_burst=5, count_per_period=10, period=60)
        unbounded = asyncio.ensure_future(limiter.try_acquire())
        await asyncio.sleep(0.3)
        started = time.monotonic()
        try:
            with pytest.raises(pg_distlock.Unavailable):
                await asyncio.wait_for(limiter.acquire(timeout=1), 8)
        finally:
            unbounded.cancel()
            with contextlib.suppress(BaseException):
                await unbounded
        assert time.monotonic() - started < 4


# -- R39-B3. A wait longer than threading's TIMEOUT_MAX


def test_a_lease_with_a_very_long_wait_waits_for_a_busy_pool(db: Db, name: str) -> None:
    """wait is checked only to be finite: wait=1e10 (317 years, "forever")
    becomes the pool checkout's timeout, which psycopg_pool hands to
    threading.Condition.wait: OverflowError ("timeout value is too large")
    whenever the pool must wait, where acquire() waited for the pool before."""
    with pg_distlock.Client(db.dsn, min_size=1, max_size=1) as client:
        client.pool.wait()
        lease = client.lease(name, ttl=30, wait=1e10)
        with pool_busy_between(client.pool, 0, 0.5):
            time.sleep(0.1)
            lease.acquire()
        assert lease.held
        lease.release()
