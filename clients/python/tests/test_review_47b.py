"""Review 47 (helper) of the acquire bound (978e359..194dc4e): each test is a
break found by attacking it, failing on 194dc4e.

(test_review_47.py is an earlier review's, of issue 47's changes.)"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from typing import Any, Callable, Iterator

import pytest

import pg_distlock
from pg_distlock import aio

KINDS = ["lease", "semaphore", "rate_limiter"]
HOSTS = 3
"""Silent hosts in the conninfo: a three-node cluster (Patroni and the like),
named as the README's first example names its two."""
SINGLE_HOST_BOUND = 2 + 2.0
"""What test_acquire_bound allows a wait of 1 s on a single silent host:
libpq's least connect_timeout (2 s), then the bound of a pool's checkout."""


@contextlib.contextmanager
def silent_hosts(count: int) -> Iterator[str]:
    """A multi-host conninfo (README: `host=db1,db2 ... target_session_attrs=
    read-write`) whose every server accepts TCP and never answers (a
    partition, a host stopped with SIGSTOP)."""
    listeners = []
    for _ in range(count):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listeners.append(listener)
    hosts = ",".join("127.0.0.1" for _ in listeners)
    ports = ",".join(str(listener.getsockname()[1]) for listener in listeners)
    try:
        yield f"host={hosts} port={ports} dbname=x user=x target_session_attrs=read-write"
    finally:
        for listener in listeners:
            listener.close()


def make(kind: str, flavour: Any, source: str, name: str) -> Callable[[], Any]:
    if kind == "lease":
        return flavour.Lease(source, name, ttl=30, wait=1).acquire  # type: ignore[no-any-return]
    if kind == "semaphore":
        return flavour.Semaphore(source, name, 2, ttl=30, wait=1).acquire  # type: ignore[no-any-return]
    made = flavour.RateLimiter(source, name, max_burst=5, count_per_period=10, period=60)
    return lambda: made.acquire(timeout=1)


@pytest.mark.parametrize("kind", KINDS)
def test_an_acquire_on_a_multi_host_conninfo_that_does_not_answer_ends_within_its_wait(kind: str) -> None:
    """The client gives the connect libpq's connect_timeout of 2 s; psycopg
    (and libpq) apply it to each host of the conninfo in turn, so wait=1
    took 2 s per host: 6 s on three, 4 s on the README's two."""
    outcome: list[float] = []

    def run(acquire: Callable[[], Any]) -> None:
        started = time.monotonic()
        with contextlib.suppress(pg_distlock.Unavailable):
            acquire()
        outcome.append(time.monotonic() - started)

    with silent_hosts(HOSTS) as conninfo:
        thread = threading.Thread(target=run, args=(make(kind, pg_distlock, conninfo, f"r47b-{kind}"),), daemon=True)
        thread.start()
        thread.join(20)
    assert outcome, "still waiting after 20 s"
    assert outcome[0] < SINGLE_HOST_BOUND, f"acquire(wait=1) on {HOSTS} silent hosts took {outcome[0]:.1f} s"


@pytest.mark.parametrize("kind", KINDS)
async def test_an_asyncio_acquire_on_a_multi_host_conninfo_that_does_not_answer_ends_within_its_wait(
        kind: str) -> None:
    async def run(acquire: Callable[[], Any]) -> float:
        started = time.monotonic()
        with contextlib.suppress(pg_distlock.Unavailable):
            await acquire()
        return time.monotonic() - started

    with silent_hosts(HOSTS) as conninfo:
        took = await asyncio.wait_for(run(make(kind, aio, conninfo, f"r47b-{kind}")), 20)
    assert took < SINGLE_HOST_BOUND, f"acquire(wait=1) on {HOSTS} silent hosts took {took:.1f} s"


def test_an_acquire_on_a_pool_of_a_multi_host_conninfo_that_does_not_answer_ends_within_its_wait() -> None:
    """A pool with docs/failures.md's conninfo (two hosts, connect_timeout=2)
    whose servers stopped answering: the checkout times out after the wait,
    then pool_timeout_cause probes with a connection of its own, which takes
    connect_timeout on each host (4 s) before acquire(wait=1) raises: 5 s.
    The probe is not bounded by what is left of the wait at all (one silent
    host: 3 s). test_acquire_bound allows 2 s behind a pool that cannot give
    one (its servers refuse at once there)."""
    from psycopg_pool import ConnectionPool

    with silent_hosts(2) as conninfo:
        pool = ConnectionPool(conninfo + " connect_timeout=2", min_size=1, max_size=2, open=True,
                              kwargs={"autocommit": True})
        try:
            deadline = time.monotonic() + 15
            while not pool.get_stats().get("connections_errors", 0):
                assert time.monotonic() < deadline, "the pool never failed to connect"
                time.sleep(0.2)
            acquire = pg_distlock.Client(pool).lease("r47b-pool", ttl=30, wait=1).acquire
            started = time.monotonic()
            with pytest.raises(pg_distlock.Unavailable):
                acquire()
            took = time.monotonic() - started
        finally:
            pool.close(timeout=0)
    assert took < 2.0, f"acquire(wait=1) behind a pool of two silent hosts took {took:.1f} s"
