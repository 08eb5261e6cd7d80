"""Deadlocks across a client's connections (issue 47, item 2): the client
holds each lock on a connection of its own, so two processes (or threads)
that take two locks in opposite orders were no cycle to PostgreSQL and both
waited for ever. Each lock now carries its owner (worker id and thread or
task): exactly one of them gets Deadlock after deadlock_timeout, and the
other goes on once the loser's `with` block lets its first lock go."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import pytest

import pg_distlock
from pg_distlock import aio
from conftest import Db, PRIMARY, dsn

FAST = {"options": "'-c deadlock_timeout=100ms -c lock_timeout=20s'"}


def conninfo(db: Db) -> str:
    return dsn(PRIMARY, db.name, **FAST)


def inversion(client: Any, first: str, second: str, ready: threading.Barrier, outcome: list[str]) -> None:
    try:
        with client.lock(first):
            ready.wait(timeout=10)
            with client.lock(second):
                outcome.append("both")
    except pg_distlock.Deadlock as exc:
        outcome.append(f"deadlock: {exc}")
    except Exception as exc:  # the test reports it
        outcome.append(f"{type(exc).__name__}: {exc}")


def test_two_threads_taking_two_locks_in_opposite_orders_have_one_victim(db: Db) -> None:
    with pg_distlock.Client(conninfo(db), worker_id="w1") as c1, pg_distlock.Client(conninfo(db), worker_id="w2") as c2:
        ready = threading.Barrier(2)
        outcomes: list[list[str]] = [[], []]
        threads = [
            threading.Thread(target=inversion, args=(c1, "ledger-A", "ledger-B", ready, outcomes[0])),
            threading.Thread(target=inversion, args=(c2, "ledger-B", "ledger-A", ready, outcomes[1])),
        ]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        took = time.monotonic() - started
    flat = [o for out in outcomes for o in out]
    assert sorted(o.split(":")[0] for o in flat) == ["both", "deadlock"], flat
    assert took < 5, f"resolved within deadlock_timeout plus a second or so, took {took:.1f} s"


def test_one_thread_of_one_client_waiting_on_itself_is_a_deadlock_not_a_hang(db: Db) -> None:
    """A lock held on one connection and asked for again from the same thread
    (a reentrant call the client does not support) used to wait for ever."""
    with pg_distlock.Client(conninfo(db), worker_id="self") as client:
        with client.lock("self-x"):
            with pytest.raises(pg_distlock.Deadlock):
                with client.lock("self-x"):
                    pass


def test_two_threads_of_one_client_are_two_owners(db: Db) -> None:
    """One worker id, two threads: the second waits for the first to let go
    (no deadlock), since each thread is an owner of its own."""
    with pg_distlock.Client(conninfo(db), worker_id="shared") as client:
        held = threading.Event()
        release = threading.Event()

        def holder() -> None:
            with client.lock("two-x"):
                held.set()
                release.wait(timeout=10)

        t = threading.Thread(target=holder)
        t.start()
        assert held.wait(timeout=10)
        threading.Timer(0.5, release.set).start()  # well past deadlock_timeout
        with client.lock("two-x", timeout=10):
            pass
        t.join(timeout=10)


def test_two_asyncio_tasks_inverting_have_one_victim(db: Db) -> None:
    async def run() -> list[str]:
        async with aio.Client(conninfo(db), worker_id="a1") as c1, aio.Client(conninfo(db), worker_id="a2") as c2:
            both_hold = asyncio.Barrier(2)

            async def invert(client: Any, first: str, second: str) -> str:
                try:
                    async with client.lock(first):
                        await both_hold.wait()
                        async with client.lock(second):
                            return "both"
                except pg_distlock.Deadlock:
                    return "deadlock"

            return list(await asyncio.wait_for(
                asyncio.gather(invert(c1, "aio-A", "aio-B"), invert(c2, "aio-B", "aio-A")), timeout=30))

    if sys.version_info < (3, 11):
        pytest.skip("asyncio.Barrier needs Python 3.11")
    assert sorted(asyncio.run(run())) == ["both", "deadlock"]


def test_two_processes_inverting_have_one_victim(db: Db) -> None:
    """As the issue found it: two processes, each with its own client."""
    script = textwrap.dedent(f"""
        import sys, time, pg_distlock
        first, second, go = sys.argv[1], sys.argv[2], sys.argv[3]
        with pg_distlock.Client({conninfo(db)!r}) as client:
            try:
                with client.lock(first):
                    print("holding", flush=True)
                    while not __import__("os").path.exists(go):
                        time.sleep(0.01)
                    with client.lock(second):
                        print("both", flush=True)
            except pg_distlock.Deadlock:
                print("deadlock", flush=True)
    """)
    go = f"/tmp/pg_distlock_deadlock_go_{db.name}"
    procs = [subprocess.Popen([sys.executable, "-c", script, a, b, go], stdout=subprocess.PIPE, text=True)
             for a, b in (("proc-A", "proc-B"), ("proc-B", "proc-A"))]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "holding"
        open(go, "w").close()
        outs = [p.communicate(timeout=30)[0].split() for p in procs]
    finally:
        for p in procs:
            p.kill()
        import os
        if os.path.exists(go):
            os.remove(go)
    assert sorted(o[-1] for o in outs) == ["both", "deadlock"], outs
