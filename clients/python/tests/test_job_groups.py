"""Job groups (pg_distlock 0.4.0, issue 49 item 1): Queue.enqueue and
enqueue_many put jobs in a group of their queue; a claimed Job says its group;
the group stays with the job when it completes, and the console's job page shows it, escaped;
unique_for keeps a completed job's unique key held for its window."""

from __future__ import annotations

import re
from datetime import timedelta

import pg_distlock
import pytest
from pg_distlock import aio

from conftest import Db
from test_console import console

EVIL = "<script>alert(1)</script>"


def group_of(db: Db, job: int) -> object:
    return db.value("SELECT group_key FROM distlock.jobs WHERE id = %s", job)


def test_enqueue_and_enqueue_many_put_jobs_in_a_group(db: Db) -> None:
    queue = pg_distlock.Queue(db.dsn, worker_id="w", queues=["grouped"])
    one = queue.enqueue("sync", {"n": 1}, queue="grouped", group="customer:7")
    keyed = queue.enqueue("sync", {"n": 2}, queue="grouped", unique_key="k", group="customer:8")
    many = queue.enqueue_many("sync", [{"n": 3}, {"n": 4}], queue="grouped", group="customer:9")
    plain = queue.enqueue("sync", queue="grouped")
    assert [group_of(db, job) for job in (one, keyed, *many, plain)] == [
        "customer:7", "customer:8", "customer:9", "customer:9", None]
    jobs = queue.consume(batch=10)
    assert {job.id: job.group for job in jobs} == {
        one: "customer:7", keyed: "customer:8", many[0]: "customer:9", many[1]: "customer:9", plain: None}
    assert queue.complete_many(jobs) == {one, keyed, *many, plain}
    assert db.value("SELECT group_key FROM distlock.completed_jobs WHERE id = %s", one) == "customer:7"


def test_a_blank_group_is_refused_by_the_server(db: Db) -> None:
    queue = pg_distlock.Queue(db.dsn)
    with pytest.raises(pg_distlock.DistlockError) as refused:
        queue.enqueue("sync", group=" ")
    assert refused.value.sqlstate == "22023"


def test_the_job_page_shows_the_group_escaped(db: Db) -> None:
    queue = pg_distlock.Queue(db.dsn)
    job = queue.enqueue("sync", queue="grouped-page", group=EVIL)
    with console(db.dsn) as (client, _):
        page = client.get(f"/jobs/{job}").text
    assert "<dt>group</dt><dd>&lt;script&gt;alert(1)&lt;/script&gt;</dd>" in page
    assert EVIL not in page


def test_the_job_list_shows_each_jobs_group_escaped(db: Db) -> None:
    """Unfinished and completed jobs alike; none for a job without one."""
    queue = pg_distlock.Queue(db.dsn, worker_id="w", queues=["grouped-list"])
    done = queue.enqueue("sync", queue="grouped-list", group="finished-group")
    (job,) = queue.consume()
    assert queue.complete(job)
    waiting = queue.enqueue("sync", queue="grouped-list", group=EVIL)
    plain = queue.enqueue("sync", queue="grouped-list")
    with console(db.dsn) as (client, _):
        page = client.get("/jobs", params={"queue": "grouped-list"}).text
    rows = {int(job): row for job, row in re.findall(r'<tr data-job="(\d+)"(.*?)</tr>', page, re.S)}
    assert set(rows) == {done, waiting, plain}
    assert '<small class="group" title="group">finished-group</small>' in rows[done]
    assert '<small class="group" title="group">&lt;script&gt;alert(1)&lt;/script&gt;</small>' in rows[waiting]
    assert 'class="group"' not in rows[plain]
    assert EVIL not in page


def test_unique_for_keeps_a_completed_jobs_key_for_the_window(db: Db) -> None:
    queue = pg_distlock.Queue(db.dsn, worker_id="w", queues=["dedup-py"])
    first = queue.enqueue("sync", queue="dedup-py", unique_key="account:7", unique_for=3600)
    [job] = queue.consume()
    assert queue.complete(job)
    assert queue.enqueue("sync", queue="dedup-py", unique_key="account:7", unique_for=timedelta(hours=1)) == first
    assert queue.enqueue("sync", queue="dedup-py", unique_key="account:7") != first
    with pytest.raises(pg_distlock.InvalidArgument):
        queue.enqueue("sync", queue="dedup-py", unique_for=60)
    for bad in (0, -1, float("inf")):
        with pytest.raises(pg_distlock.InvalidArgument):
            queue.enqueue("sync", queue="dedup-py", unique_key="k", unique_for=bad)


def test_every_way_of_claiming_says_the_group(db: Db) -> None:
    """consume() of one job (consume_task), and QueueWorker's claims
    (settle_and_consume_tasks), give each Job its group."""
    queue = pg_distlock.Queue(db.dsn, worker_id="w", queues=["told"])
    first = queue.enqueue("sync", queue="told", group="g1", priority=2)
    (job,) = queue.consume()
    assert (job.id, job.group) == (first, "g1")
    queue.complete(job)
    ids: dict[int, str | None] = {queue.enqueue("sync", queue="told", group=f"w{i}"): f"w{i}" for i in range(3)}
    ids[queue.enqueue("sync", queue="told")] = None
    seen: dict[int, str | None] = {}
    stats = pg_distlock.QueueWorker(db.dsn, lambda job: seen.update({job.id: job.group}), queues=["told"],
                                    wait=0.2, exit_when_idle=True, handle_signals=False).run()
    assert stats.completed == 4
    assert seen == ids


async def test_the_asyncio_queue_says_the_group(db: Db) -> None:
    queue = aio.Queue(db.dsn, worker_id="a", queues=["told-async"])
    try:
        job_id = await queue.enqueue("sync", queue="told-async", group="ga")
        (job,) = await queue.consume()
        assert (job.id, job.group) == (job_id, "ga")
    finally:
        await queue.close()
