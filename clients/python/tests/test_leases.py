from __future__ import annotations

import asyncio
import os
import signal
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

import pg_distlock
from pg_distlock import LeaseLost, LockTimeout, aio
from conftest import Db, eventually


def expires_at(db: Db, name: str, owner: str) -> object:
    return db.value("SELECT expires_at FROM distlock.leases WHERE name = %s AND owner = %s", name, owner)


@contextmanager
def frozen_backend(db: Db, application_name: str) -> Iterator[None]:
    """SIGSTOPs the backend serving `application_name`: its client's calls hang
    as they would on a dead network."""
    pid = int(eventually(lambda: db.value(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", application_name), what="the backend"))

    def stopped_between_statements() -> bool:
        # Stopped inside a statement, the backend would keep the rows it
        # locked, and every other node's call would queue behind them until
        # lock_timeout: a different failure from the dead network meant here.
        os.kill(pid, signal.SIGSTOP)
        if db.value("SELECT state FROM pg_stat_activity WHERE pid = %s", pid) == "idle":
            return True
        os.kill(pid, signal.SIGCONT)
        return False

    eventually(stopped_between_statements, what="the backend between two statements")
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def test_lease_gives_a_token_and_keeps_others_out(db: Db, name: str) -> None:
    with pg_distlock.Lease(db.dsn, name, "a", ttl=5) as lease:
        assert lease.token is not None
        assert db.value("SELECT distlock.check_lease_token(%s, %s)", name, lease.token) is True
        with pytest.raises(LockTimeout):
            pg_distlock.Lease(db.dsn, name, "b", ttl=5, wait=0.2).acquire()
    with pg_distlock.Lease(db.dsn, name, "b", ttl=5) as other:
        assert other.token is not None and other.token > lease.token
    assert db.value("SELECT count(*) FROM distlock.leases WHERE name = %s AND is_held", name) == 0


@pytest.mark.parametrize("via_pooler", [False, True], ids=["direct", "pgbouncer"])
def test_renewer_keeps_the_lease_past_its_ttl(db: Db, name: str, via_pooler: bool) -> None:
    with pg_distlock.Lease(db.pooled_dsn if via_pooler else db.dsn, name, "a", ttl=0.6) as lease:
        first = expires_at(db, name, "a")
        seen = {first}
        # Three distinct renewals: the lease outlives several TTLs.
        eventually(lambda: seen.add(expires_at(db, name, "a")) or len(seen) >= 4, timeout=5, what="renewals")
        assert db.value("SELECT distlock.check_lease_token(%s, %s)", name, lease.token) is True
        assert not lease.lost.is_set()


def test_lost_the_moment_the_server_says_so(db: Db, name: str) -> None:
    reasons: list[str] = []
    with pg_distlock.Lease(db.dsn, name, "a", ttl=0.6, on_lost=reasons.append) as lease:
        db.value("SELECT distlock.force_release_lease(%s)", name)
        assert lease.lost.wait(3)
        with pytest.raises(LeaseLost):
            lease.check()
    assert len(reasons) == 1 and "no longer" in reasons[0]


def test_lost_when_no_renewal_is_confirmed_within_the_ttl(db: Db, name: str) -> None:
    app = f"renewer-{name}"
    source = f"{db.dsn} application_name={app}"
    lease = pg_distlock.Lease(source, name, "a", ttl=1.0)
    lease.acquire()
    try:
        with frozen_backend(db, app):
            started = time.monotonic()
            assert lease.lost.wait(3), "a hung renewal did not end the lease"
            assert time.monotonic() - started <= 1.0 + 0.5  # the TTL, and slack for a loaded machine
            assert "TTL" in (lease.lost_reason or "")
    finally:
        lease.release()


def test_semaphore_admits_max_holders(db: Db, name: str) -> None:
    with pg_distlock.Semaphore(db.dsn, name, 2, "a", ttl=5), pg_distlock.Semaphore(db.dsn, name, 2, "b", ttl=5):
        with pytest.raises(LockTimeout):
            pg_distlock.Semaphore(db.dsn, name, 2, "c", ttl=5, wait=0.2).acquire()
        third = pg_distlock.Semaphore(db.dsn, name, 2, "c", ttl=5, wait=5)
    with third:
        assert db.value("SELECT count(*) FROM distlock.leases WHERE name = %s AND is_held", name) == 1


def test_semaphore_slot_is_renewed(db: Db, name: str) -> None:
    with pg_distlock.Semaphore(db.dsn, name, 1, "a", ttl=0.6) as slot:
        first = expires_at(db, name, "a")
        eventually(lambda: expires_at(db, name, "a") != first, timeout=3, what="a renewal")
        assert not slot.lost.is_set()


async def test_async_lease_has_the_same_shape(db: Db, name: str) -> None:
    lost: list[str] = []

    async def on_lost(reason: str) -> None:
        lost.append(reason)

    async with aio.Lease(db.dsn, name, "a", ttl=0.6, on_lost=on_lost) as lease:
        first = expires_at(db, name, "a")
        while expires_at(db, name, "a") == first:
            await asyncio.sleep(0.02)
        db.value("SELECT distlock.force_release_lease(%s)", name)
        await asyncio.wait_for(lease.lost.wait(), 3)
    assert lost


async def test_async_semaphore(db: Db, name: str) -> None:
    async with aio.Semaphore(db.dsn, name, 1, "a", ttl=5):
        with pytest.raises(LockTimeout):
            await aio.Semaphore(db.dsn, name, 1, "b", ttl=5, wait=0.1).acquire()
