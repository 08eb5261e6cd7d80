"""Who holds what, by worker: the default owner of leases, semaphore slots
and leaderships names the client's worker id, and the console's /workers
page groups a worker's claims, jobs, holds and locks under it."""

from __future__ import annotations

import os
import re
import socket

import pytest

import pg_distlock
import pg_distlock.aio
from conftest import Db

HOST_PID = f"{socket.gethostname()}:{os.getpid()}"


def made_here(owner: str, worker_id: str) -> bool:
    """Whether `owner` is `<worker_id>/<host>:<pid>:<random>` of this process."""
    return re.fullmatch(re.escape(f"{worker_id}/{HOST_PID}:") + "[0-9a-f]{8}", owner) is not None


def test_a_clients_holds_are_owned_in_its_worker_id_and_never_share_an_owner(db: Db) -> None:
    with pg_distlock.Client(db.dsn, worker_id="billing/7") as client:
        first, second = client.lease("export"), client.lease("export")
        slot, leader = client.semaphore("gpu", 2), client.leader("scheduler")
        owners = [first.owner, second.owner, slot.owner, leader.node]
        assert all(made_here(owner, "billing/7") for owner in owners), owners
        assert len(set(owners)) == 4, "two holders in one process never share an owner"
        with first:
            with pytest.raises(pg_distlock.LockTimeout):
                second.acquire()  # the same process's other holder is another owner
            assert db.rows("SELECT owner FROM distlock.leases WHERE name = 'export'") == [(first.owner,)]
        with slot:
            assert db.value("SELECT owner FROM distlock.leases WHERE name = 'gpu'") == slot.owner
        given = client.lease("export", owner="explicit-owner")
        assert given.owner == "explicit-owner" and client.leader("g", node="node-2").node == "node-2"


def test_holds_made_on_their_own_are_owned_in_host_and_pid(db: Db) -> None:
    lease = pg_distlock.Lease(db.dsn, "export")
    leader = pg_distlock.Leader(db.dsn, "scheduler")
    try:
        assert made_here(lease.owner, HOST_PID) and made_here(leader.node, HOST_PID)
        assert lease.owner != pg_distlock.Lease(db.dsn, "export").owner
    finally:
        lease.close()
        leader.close()


def test_an_asyncio_clients_holds_are_owned_in_its_worker_id(db: Db) -> None:
    client = pg_distlock.aio.Client(db.dsn, worker_id="async-1")
    assert made_here(client.lease("x").owner, "async-1") and made_here(client.leader("g").node, "async-1")
    assert made_here(client.semaphore("s", 3).owner, "async-1")
