"""Queue.consume(wait=...) behind a pool with no connection to give: getting
the connection counts against the wait (at least a second for it, as a
lock's), so the call raises Unavailable in about that time, naming the
cause, instead of after the pool's own timeout (30 s by default)."""

from __future__ import annotations

import asyncio
import time

import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import pg_distlock
from pg_distlock import aio
from conftest import Db, PRIMARY, dsn
from test_acquire_bound import all_taken, all_taken_async

POOL_TIMEOUT = 30.0


@pytest.mark.parametrize("wait", [0.0, 1.5])
def test_consume_behind_a_pool_with_none_to_give_ends_within_its_wait(db: Db, wait: float) -> None:
    pool = ConnectionPool(dsn(PRIMARY, db.name), min_size=1, max_size=1, timeout=POOL_TIMEOUT, open=True,
                          kwargs={"autocommit": True})
    try:
        pool.wait(timeout=10)
        queue = pg_distlock.Queue(pool, worker_id="bound")
        queue.consume()  # features known, as for a worker that ran a while
        with all_taken(pool):
            started = time.monotonic()
            with pytest.raises(pg_distlock.Unavailable):
                queue.consume(wait=wait)
            took = time.monotonic() - started
    finally:
        pool.close()
    assert took < max(wait, 1.0) + 1.5, f"consume(wait={wait}) took {took:.1f} s (the pool's own timeout is 30 s)"


def test_an_asyncio_consume_behind_a_pool_with_none_to_give_ends_within_its_wait(db: Db) -> None:
    async def run() -> float:
        pool = AsyncConnectionPool(dsn(PRIMARY, db.name), min_size=1, max_size=1, timeout=POOL_TIMEOUT,
                                   open=False, kwargs={"autocommit": True})
        await pool.open(wait=True, timeout=10)
        try:
            queue = aio.Queue(pool, worker_id="bound")
            await queue.consume()
            async with all_taken_async(pool):
                started = time.monotonic()
                with pytest.raises(pg_distlock.Unavailable):
                    await queue.consume(wait=1.5)
                return time.monotonic() - started
        finally:
            await pool.close()

    took = asyncio.run(run())
    assert took < 1.5 + 1.5, f"took {took:.1f} s"
