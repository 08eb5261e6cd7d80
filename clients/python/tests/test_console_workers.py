"""Who holds what, by worker: the default owner of leases, semaphore slots
and leaderships names the client's worker id, and the console's /workers
page groups a worker's claims, jobs, holds and locks under it."""

from __future__ import annotations

import contextlib
import html
import os
import re
import socket
from typing import Iterator

import psycopg
import pytest

import pg_distlock
import pg_distlock.aio
from conftest import Db, connect
from pg_distlock.inspect import reads
from pg_distlock.inspect.workers import hold_owner_worker, lock_owner_worker
from test_console import console, post

HOST_PID = f"{socket.gethostname()}:{os.getpid()}"
EVIL = "<script>alert(1)</script>"


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


def test_owners_are_read_back_as_worker_ids() -> None:
    assert lock_owner_worker("billing/7/host:12:ab12cd34/thread-3") == "billing/7"
    assert lock_owner_worker("w/host:12:ab12cd34/task-15") == "w"
    for other in ("w/host:1:ab/thread-x", "w/thread-3", "owner#1a2b3c", "/h:1:a/thread-1", "w//thread-1"):
        assert lock_owner_worker(other) == other, other
    assert hold_owner_worker("billing/7/host:12:ab12cd34") == "billing/7"
    assert hold_owner_worker("node-2") == "node-2" and hold_owner_worker("/x") == "/x"


def section(page: str, worker: str) -> str:
    found = re.search(rf'<section class="worker" data-worker="{re.escape(html.escape(worker))}">(.*?)</section>',
                      page, re.S)
    assert found, f"no worker {worker}"
    return found.group(1)


def kinds(part: str) -> list[str]:
    """The kinds of hold a worker's rows show, in order."""
    return re.findall(r'<tr class="(claim|jobs|lease|slot|leadership|lock)[ "]', part)


@contextlib.contextmanager
def busy_worker(db: Db, worker: str) -> Iterator[tuple[pg_distlock.Client, int, psycopg.Connection]]:
    """`worker` holding, through a Client with that worker id, a lease, a
    semaphore slot, a leadership, a lock and a job; and a session claim of
    a task (its task lock is shown as the claim); the client, the task and
    the claim's connection."""
    task = db.add_tasks(1, f"{worker}-task")[0]
    claimer = connect(db.dsn)
    assert claimer.execute("SELECT distlock.try_acquire_task_lock(%s, %s)", (task, worker)).fetchone() == (True,)
    with pg_distlock.Client(db.dsn, worker_id=worker) as client:
        queue = client.queue(worker_id=worker)
        queue.enqueue("send", {})
        assert queue.consume() is not None
        with client.lease("export"), client.semaphore("gpu", 2), client.lock("orders:1"), \
                client.leader("scheduler") as leader:
            assert leader.wait_elected(10)
            try:
                yield client, task, claimer
            finally:
                claimer.close()


def test_the_workers_page_groups_what_each_worker_holds_under_its_worker_id(db: Db) -> None:
    plain = connect(db.dsn + " application_name=plain")
    plain.execute("SELECT distlock.lock('unowned')")
    try:
        with busy_worker(db, "billing/1") as (_, task, _claimer), \
                pg_distlock.Client(db.dsn, worker_id="other") as other, other.lease("import"), \
                pg_distlock.Lease(db.dsn, "mine", owner="node-2"):
            with console(db.dsn) as (client, _):
                response = client.get("/workers")
                assert response.status_code == 200 and '<a href="/workers"' in response.text
                page = response.text
                billing = section(page, "billing/1")
                assert kinds(billing) == ["claim", "jobs", "lease", "slot", "leadership", "lock"]
                assert f'<a href="/tasks/{task}">billing/1-task-1</a>' in billing
                assert ">export<" in billing and ">gpu " in billing and ">scheduler<" in billing
                assert ">orders:1<" in billing and "/thread-" in billing, "the lock by its owner"
                assert "<p class=\"summary\">1 task claim(s), 1 job(s) processing, 1 lease(s), 1 semaphore slot(s)," \
                       " 1 leadership(s), 1 lock(s)</p>" in billing
                assert kinds(section(page, "other")) == ["lease"] and ">import<" in section(page, "other")
                assert kinds(section(page, "node-2")) == ["lease"], "an owner of another shape is a worker of its own"
                unowned = re.search(r'<section id="unowned-locks">(.*?)</section>', page, re.S)
                assert unowned and f'data-pid="{plain.info.backend_pid}"' in unowned.group(1)
                assert ">unowned<" in unowned.group(1) and "orders:1" not in unowned.group(1)
                assert "billing/1-task" not in unowned.group(1), "a claim's task lock is the claim"
                assert "jobs-need-admin" not in page and "no-lock-owners" not in page
                assert client.get("/workers", params={"part": "main"}).text.lstrip().startswith("<h1>Workers</h1>")
    finally:
        plain.close()


def test_a_monitor_sees_the_workers_and_a_count_where_jobs_need_admin(db: Db, monitor_role: str) -> None:
    # The owner of another role's session shows only to a role that may see
    # its activity (pg_stat_activity's rule): without this the lock is listed
    # by pid, as test_a_monitor_without_stats_sees_other_roles_locks_by_pid checks.
    db.admin.execute(f"GRANT pg_read_all_stats TO {monitor_role}")
    with busy_worker(db, "billing-1"):
        with console(f"{db.dsn} user={monitor_role}") as (client, token):
            page = client.get("/workers").text
            billing = section(page, "billing-1")
            assert kinds(billing) == ["claim", "lease", "slot", "leadership", "lock"], "no jobs row"
            assert "needs the admin capability; 1 job(s) are processing in all" in page
            assert "<form" not in page and "<button" not in page
            assert post(client, "release-lease", token=token, name="export", confirmed="yes").status_code == 403


def test_without_lock_owners_locks_are_listed_by_session(db: Db) -> None:
    """A server before distlock.lock_owner: the locks show, by pid."""
    db.admin.execute("ALTER FUNCTION distlock.lock_owner(integer) RENAME TO lock_owner_elsewhere")
    with busy_worker(db, "billing-1"):
        with console(db.dsn) as (client, _):
            page = client.get("/workers").text
            assert 'id="no-lock-owners"' in page
            assert kinds(section(page, "billing-1")) == ["claim", "jobs", "lease", "slot", "leadership"]
            unowned = re.search(r'<section id="unowned-locks">(.*?)</section>', page, re.S)
            assert unowned and ">orders:1<" in unowned.group(1)
        # Gone between the check and the read: by session, not an error.
        locks = reads.owned_locks(db.admin, True)
        assert locks and [lock["owner"] for lock in locks] == [None]


def test_hostile_worker_ids_and_owners_show_as_text(db: Db) -> None:
    with busy_worker(db, EVIL), pg_distlock.Lease(db.dsn, EVIL, owner=EVIL + "/x"):
        with console(db.dsn) as (client, _):
            for path in ("/workers", "/workers?part=main"):
                response = client.get(path)
                assert response.status_code == 200 and "<script>" not in response.text, path
            assert kinds(section(client.get("/workers").text, EVIL)) == ["claim", "jobs", "lease", "lease", "slot",
                                                                        "leadership", "lock"]


def test_a_monitor_without_stats_sees_other_roles_locks_by_pid(db: Db, monitor_role: str) -> None:
    with busy_worker(db, "billing-1"):
        with console(f"{db.dsn} user={monitor_role}") as (client, _):
            page = client.get("/workers").text
            assert "lock" not in kinds(section(page, "billing-1")), "no owner shown for a hidden session"
            unowned = re.search(r'<section id="unowned-locks">(.*?)</section>', page, re.S)
            assert unowned and "orders:1" in unowned.group(1), "its lock is listed by pid"
