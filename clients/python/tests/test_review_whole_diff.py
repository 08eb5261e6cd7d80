"""Review of the whole 0.4.0 diff (queue counters, owner deadlocks, Python
client) where its parts meet: one worker id in two processes was one lock owner (failed on be066f9).
Its other break, the wait histogram counting the enqueuing transaction, is documented (docs/metrics.md)
and its test stays on branch review-whole-diff."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time


import pg_distlock
from conftest import Db, PRIMARY, dsn

FAST = {"options": "'-c deadlock_timeout=100ms -c lock_timeout=20s'"}


def conninfo(db: Db) -> str:
    return dsn(PRIMARY, db.name, **FAST)


def test_two_processes_with_one_configured_worker_id_are_not_one_owner(db: Db) -> None:
    """Client(worker_id=...) names the client's connections (application_name
    pg_distlock:client:<worker_id>): a service's replicas are naturally
    configured with one worker id. A lock's owner is that worker id and a
    number counted per process from 1, so the first locking thread of every
    replica is "svc/thread-1": the same owner. Plain contention, one replica
    waiting for a lock another holds (and will release in 1.5 s), is then
    taken for "its own other connection" holding the lock and raises
    Deadlock after deadlock_timeout, where the wait should simply succeed.
    Fix: make the owner unique per process (e.g. worker id + host:pid +
    number, or a random per-process nonce), not the bare worker id."""
    script = textwrap.dedent(f"""
        import sys, time, pg_distlock
        role = sys.argv[1]
        with pg_distlock.Client({conninfo(db)!r}, worker_id="svc") as client:
            try:
                if role == "holder":
                    with client.lock("svc-x"):
                        print("holding", flush=True)
                        time.sleep(1.5)
                    print("released", flush=True)
                else:
                    with client.lock("svc-x", timeout=15):
                        print("got it", flush=True)
            except pg_distlock.Deadlock as exc:
                print("deadlock:", exc, flush=True)
    """)
    holder = subprocess.Popen([sys.executable, "-c", script, "holder"], stdout=subprocess.PIPE, text=True)
    waiter = None
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        waiter = subprocess.Popen([sys.executable, "-c", script, "waiter"], stdout=subprocess.PIPE, text=True)
        out = waiter.communicate(timeout=30)[0].strip()
        holder.communicate(timeout=30)
    finally:
        holder.kill()
        if waiter is not None:
            waiter.kill()
    assert out == "got it", f"another process's plain lock contention was taken for a deadlock: {out!r}"
