from __future__ import annotations

import time

import pytest

import pg_distlock
from pg_distlock import RateLimited, aio, snowflake
from conftest import Db


@pytest.mark.parametrize("via_pooler", [False, True], ids=["direct", "pgbouncer"])
def test_throttle_reports_the_retry_delay(db: Db, name: str, via_pooler: bool) -> None:
    source = db.pooled_dsn if via_pooler else db.dsn
    results = [pg_distlock.throttle(source, name, 2, 1, 1.0) for _ in range(4)]
    assert [r.allowed for r in results] == [True, True, True, False]
    assert results[0].retry_after is None and results[0].limit == 3
    assert results[3].retry_after is not None and 0 < results[3].retry_after <= 1.0


def test_acquire_waits_the_retry_delay(db: Db, name: str) -> None:
    limiter = pg_distlock.RateLimiter(db.dsn, name, max_burst=0, count_per_period=5, period=1.0)
    assert limiter.acquire().allowed
    denied = limiter.try_acquire()
    assert not denied.allowed and denied.retry_after is not None
    started = time.monotonic()
    assert limiter.acquire(timeout=2).allowed
    assert time.monotonic() - started >= denied.retry_after * 0.8


def test_acquire_raises_when_the_wait_exceeds_its_timeout(db: Db, name: str) -> None:
    limiter = pg_distlock.RateLimiter(db.dsn, name, max_burst=0, count_per_period=1, period=10.0)
    limiter.acquire()
    with pytest.raises(RateLimited) as info:
        limiter.acquire(timeout=0.1)
    assert info.value.retry_after is not None and 9 < info.value.retry_after <= 10
    with pytest.raises(RateLimited) as never:
        limiter.acquire(quantity=5)
    assert never.value.retry_after is None


def test_fixed_window(db: Db, name: str) -> None:
    assert [pg_distlock.check_rate_limit(db.dsn, name, 2, 60) for _ in range(3)] == [True, True, False]


async def test_async_rate_limits(db: Db, name: str) -> None:
    limiter = aio.RateLimiter(db.dsn, name, 0, 1, 10.0)
    assert (await limiter.try_acquire()).allowed
    assert not (await aio.throttle(db.dsn, name, 0, 1, 10.0)).allowed
    assert await aio.check_rate_limit(db.dsn, name, 1, 60)


def test_snowflake_decoding_matches_the_server(db: Db) -> None:
    ids = [pg_distlock.generate_snowflake_id(db.dsn, 7) for _ in range(3)]
    assert ids == sorted(set(ids))
    for sf in ids:
        ts, worker, seq = db.rows(
            "SELECT distlock.snowflake_timestamp(%s), distlock.snowflake_worker_id(%s), distlock.snowflake_sequence(%s)",
            sf, sf, sf)[0]
        assert snowflake.decode(sf) == (ts, worker, seq)
    assert snowflake.decode(0).worker_id == 0
    with pytest.raises(ValueError):
        snowflake.decode(-1)


async def test_async_snowflake(db: Db) -> None:
    sf = await aio.generate_snowflake_id(db.dsn, 1023)
    assert snowflake.worker_id(sf) == 1023


def test_max_burst_lets_one_more_request_pass_at_once_as_the_readme_says(db: Db) -> None:
    """GCRA's burst (redis-cell's too): max_burst=3 lets 4 through at once."""
    limiter = pg_distlock.RateLimiter(db.dsn, "readme-burst", max_burst=3, count_per_period=1, period=3600)
    answers = [limiter.try_acquire() for _ in range(5)]
    assert [a.allowed for a in answers] == [True, True, True, True, False]
    assert answers[0].limit == 4
