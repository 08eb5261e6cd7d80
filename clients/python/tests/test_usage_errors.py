"""Mistakes in using the client are refused in Python, at once, with the
client's own names and units."""

from __future__ import annotations

import re
import threading
from datetime import timedelta
from typing import Callable

import pytest

import pg_distlock
from pg_distlock import aio
from conftest import Db, eventually

NOWHERE = "host=/nonexistent dbname=none"  # never connected to: every check happens first


async def handler(job: pg_distlock.Job) -> None:
    pass


def test_the_blocking_api_refuses_coroutine_functions() -> None:
    with pytest.raises(TypeError, match="coroutine function"):
        pg_distlock.QueueWorker(NOWHERE, handler)
    with pytest.raises(TypeError, match="coroutine function"):
        pg_distlock.TaskWorker(NOWHERE, handler)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_elected"):
        pg_distlock.Leader(NOWHERE, "g", on_elected=handler)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_lost"):
        pg_distlock.Lease(NOWHERE, "l", on_lost=handler)  # type: ignore[arg-type]
    aio.QueueWorker(NOWHERE, handler)  # the asyncio API awaits them


def test_acquiring_a_held_lease_again_is_refused_and_leaves_no_renewer(db: Db, name: str) -> None:
    lease = pg_distlock.Lease(db.dsn, name, "me", ttl=30)
    lease.acquire()
    with pytest.raises(RuntimeError, match="already held"):
        lease.acquire()
    lease.close()
    eventually(lambda: not any(t.name.startswith("pg_distlock-renewing") and "me" in t.name
                               for t in threading.enumerate()), timeout=5, what="the renewer to end")
    assert db.value("SELECT count(*) FROM distlock.leases WHERE name = %s AND is_held", name) == 0


def test_a_lock_timeout_says_its_unit(db: Db, name: str) -> None:
    with pg_distlock.Lock(db.dsn, name):
        with pytest.raises(pg_distlock.LockTimeout, match=r"within 0.2 s"):
            pg_distlock.Lock(db.dsn, name, timeout=0.2).acquire()


@pytest.mark.parametrize("make, message", [
    (lambda: pg_distlock.Lease(NOWHERE, "l", ttl=0), "ttl must be a positive number of seconds, got 0"),
    (lambda: pg_distlock.Lease(NOWHERE, "l", ttl=timedelta(days=-1)), "ttl must be a positive number of seconds, got -86400"),
    (lambda: pg_distlock.Lease(NOWHERE, "l", wait=-1), "wait must be zero or a positive number of seconds, got -1"),
    (lambda: pg_distlock.Semaphore(NOWHERE, "s", 0), "max must be an integer of at least 1, got 0"),
    (lambda: pg_distlock.Lock(NOWHERE, "k", timeout=-0.5), "timeout must be zero or a positive number of seconds, got -0.5"),
    (lambda: pg_distlock.Leader(NOWHERE, "g", ttl=float("nan")), "ttl must be a positive number of seconds, got nan"),
    (lambda: pg_distlock.Queue(NOWHERE).consume(batch=0), "batch must be an integer of at least 1, got 0"),
    (lambda: pg_distlock.Queue(NOWHERE).consume(wait=-1), "wait must be zero or a positive number of seconds, got -1"),
    (lambda: pg_distlock.QueueWorker(NOWHERE, lambda job: None, batch=0), "batch must be an integer of at least 1, got 0"),
    (lambda: pg_distlock.TaskWorker(NOWHERE, lambda claim: None, lease=0), "lease must be a positive number of seconds, got 0"),
    (lambda: pg_distlock.RateLimiter(NOWHERE, "k", -1, 1, 1), "max_burst must be an integer of at least 0, got -1"),
    (lambda: pg_distlock.throttle(NOWHERE, "k", 1, 1, 0), "period must be a positive number of seconds, got 0"),
    (lambda: pg_distlock.check_rate_limit(NOWHERE, "k", 0, 60), "max_requests must be an integer of at least 1, got 0"),
])
def test_arguments_are_checked_in_python_with_their_names_and_units(make: Callable[[], object], message: str) -> None:
    with pytest.raises(pg_distlock.InvalidArgument, match=f"^{re.escape(message)}$") as info:
        make()
    assert isinstance(info.value, ValueError) and info.value.sqlstate is None
