"""Mistakes in using the client are refused in Python, at once, with the
client's own names and units."""

from __future__ import annotations

import threading

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
