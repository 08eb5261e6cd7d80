"""Review of consume-bound (Queue.consume(wait) bounds getting its
connection by the wait): breaks found, each a test that fails now.

README: "getting its connection counts against the wait (at least a second
for it, as for a lock)". It does not: the wait in the server (or the
polling fallback's deadline) is fixed before the connection is had, so the
time spent getting it comes on top of the wait instead of out of it. A
consume(wait=W) behind a pool busy for most of W returns after about 2 W,
and it claims jobs that arrive after its wait is over."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import pg_distlock
from pg_distlock import aio
from pg_distlock._core import features as server_features
from pg_distlock._core.features import Features
from conftest import Db, PRIMARY, dsn

WAIT = 3.0
BUSY_FOR = 2.5  # the pool's only connection is in use this long: less than the wait
SLACK = 1.0


def hold_for(pool: ConnectionPool[Any], seconds: float) -> threading.Thread:
    """Takes the pool's only connection now and gives it back `seconds` later."""
    taken = threading.Event()

    def run() -> None:
        conn = pool.getconn(timeout=10)
        taken.set()
        time.sleep(seconds)
        pool.putconn(conn)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert taken.wait(10)
    return thread


def consume_behind_a_busy_pool(db_name: str) -> float:
    pool = ConnectionPool(dsn(PRIMARY, db_name), min_size=1, max_size=1, timeout=30, open=True,
                          kwargs={"autocommit": True})
    try:
        pool.wait(timeout=10)
        queue = pg_distlock.Queue(pool, worker_id="review")
        assert queue.consume() == []  # features known on the pool's connection
        holder = hold_for(pool, BUSY_FOR)
        started = time.monotonic()
        jobs = queue.consume(wait=WAIT)
        took = time.monotonic() - started
        holder.join(10)
    finally:
        pool.close()
    assert jobs == []
    return took


def test_the_wait_in_the_server_does_not_count_the_checkout(db: Db) -> None:
    """consume(wait=3) behind a pool busy for 2.5 s: the connection comes
    within the wait, then the server waits the whole 3 s again (interval(left)
    is computed before the checkout, and `deadline` only after fx.Detect's)."""
    took = consume_behind_a_busy_pool(db.name)
    assert took < WAIT + SLACK, (
        f"consume(wait={WAIT}) took {took:.1f} s behind a pool busy for {BUSY_FOR} s: "
        "the time getting the connection was added to the wait, not counted against it (README)")


def test_the_polling_fallback_does_not_count_the_checkout(db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same where the server has no consume_task(p_wait) (the features
    as if missing, as test_queue.py's fallback): the polling deadline starts
    after fx.Detect got its connection."""
    real = server_features.parse
    monkeypatch.setattr(server_features, "parse", lambda rows: Features(task_leases=real(rows).task_leases))
    took = consume_behind_a_busy_pool(db.name)
    assert took < WAIT + SLACK, (
        f"consume(wait={WAIT}) on the polling fallback took {took:.1f} s behind a pool busy for {BUSY_FOR} s")


def test_a_job_that_comes_after_the_wait_is_over_is_claimed(db: Db) -> None:
    """What the overrun means for the caller: a job queued after consume's
    wait ended (3 s after the call) is still claimed by that call."""
    pool = ConnectionPool(dsn(PRIMARY, db.name), min_size=1, max_size=1, timeout=30, open=True,
                          kwargs={"autocommit": True})
    try:
        pool.wait(timeout=10)
        queue = pg_distlock.Queue(pool, worker_id="review")
        assert queue.consume() == []
        producer = pg_distlock.Queue(db.dsn, worker_id="producer")
        holder = hold_for(pool, BUSY_FOR)
        started = time.monotonic()

        def enqueue_late() -> None:
            time.sleep(WAIT + 0.8)
            producer.enqueue("late", {"n": 1})

        late = threading.Thread(target=enqueue_late, daemon=True)
        late.start()
        jobs = queue.consume(wait=WAIT)
        took = time.monotonic() - started
        late.join(10)
        holder.join(10)
        producer.close()
    finally:
        pool.close()
    assert jobs == [], (
        f"consume(wait={WAIT}) returned a job queued {WAIT + 0.8:.1f} s after it was called (took {took:.1f} s)")


def test_asyncio_the_wait_in_the_server_does_not_count_the_checkout(db: Db) -> None:
    async def run() -> float:
        pool = AsyncConnectionPool(dsn(PRIMARY, db.name), min_size=1, max_size=1, timeout=30, open=False,
                                   kwargs={"autocommit": True})
        await pool.open(wait=True, timeout=10)
        try:
            queue = aio.Queue(pool, worker_id="review")
            assert await queue.consume() == []
            conn = await pool.getconn(timeout=10)

            async def give_back() -> None:
                await asyncio.sleep(BUSY_FOR)
                await pool.putconn(conn)

            giver = asyncio.ensure_future(give_back())
            started = time.monotonic()
            jobs = await queue.consume(wait=WAIT)
            took = time.monotonic() - started
            await giver
            assert jobs == []
            return took
        finally:
            await pool.close()

    took = asyncio.run(run())
    assert took < WAIT + SLACK, f"aio consume(wait={WAIT}) took {took:.1f} s behind a pool busy for {BUSY_FOR} s"


def test_a_pool_made_without_kwargs_that_cannot_connect_is_not_named(db: Db) -> None:
    """Pre-existing (locks' try does the same), reached now by consume in
    1 s: psycopg_pool keeps kwargs=None for a pool made without them (the
    usual ConnectionPool(conninfo)), which pool_probe_args reads as "made at
    each connect: nothing to try it with", so a pool that can never connect
    (a database that does not exist) raises a bare Unavailable(PoolTimeout)
    instead of Misconfigured naming the connect's error, as the same pool
    made with kwargs={...} does (the commit: "raises Unavailable, naming
    the cause")."""
    pool = ConnectionPool(dsn(PRIMARY, f"{db.name}_missing"), min_size=1, max_size=1, timeout=30, open=True)
    try:
        assert pool.kwargs is None
        with pytest.raises(pg_distlock.DistlockError) as raised:
            pg_distlock.Queue(pool, worker_id="review").consume(wait=0)
    finally:
        pool.close()
    assert isinstance(raised.value, pg_distlock.Misconfigured), (
        f"{type(raised.value).__name__}: {raised.value} (cause {raised.value.__cause__!r})")
