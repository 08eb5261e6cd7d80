from __future__ import annotations

import threading
import time
from typing import Iterator

import pytest

import pg_distlock
from pg_distlock import Features, Job, NotFound, aio
from pg_distlock._core import features as server_features
from conftest import Db, eventually


@pytest.fixture(params=["as-detected", "fallback"])
def server(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Runs a test with the server's optional queue functions as detected, and
    again as if they were missing (polling, one-by-one completes)."""
    if request.param == "fallback":
        real = server_features.parse
        monkeypatch.setattr(server_features, "parse", lambda rows: Features(task_leases=real(rows).task_leases))
    yield request.param


def status(db: Db, job_id: int) -> tuple:
    return db.rows("SELECT status, attempts, last_error FROM distlock.jobs WHERE id = %s", job_id)[0]


def test_enqueue_consume_complete_fail_extend(db: Db, server: str) -> None:
    queue = pg_distlock.Queue(db.dsn, worker_id="c1", lease=30)
    payload = {"to": "a@example.com", "n": 12345678901234567890, "nested": [1, {"x": None}]}
    first = queue.enqueue("email", payload, priority=5)
    second = queue.enqueue("email")
    [job] = queue.consume()
    assert (job.id, job.name, job.payload, job.attempts, job.worker_id) == (first, "email", payload, 1, "c1")
    before = job.lease_expires_at
    assert queue.extend(job, 60)
    assert db.value("SELECT lease_expires_at FROM distlock.jobs WHERE id = %s", first) > before
    assert queue.complete(job)
    assert not queue.complete(job), "a settled attempt was settled again"
    [other] = queue.consume()
    assert queue.fail(other, "smtp timeout")
    assert status(db, first)[0] == "completed"
    assert status(db, second) == ("failed", 1, "smtp timeout")
    with pytest.raises(NotFound):
        queue.complete(Job(999999, "x", {}, 1, 1, before, 0, "c1"))


def test_a_stale_attempt_cannot_settle_the_next_one(db: Db) -> None:
    queue = pg_distlock.Queue(db.dsn, worker_id="same-id", lease=0.2)
    queue.enqueue("job")
    [stale] = queue.consume()
    fresh = eventually(lambda: queue.consume(), timeout=5, what="the expired lease to be taken over")[0]  # type: ignore[index]
    assert fresh.attempts == stale.attempts + 1
    assert not queue.complete(stale)
    assert queue.complete(fresh)


def test_complete_many(db: Db, server: str) -> None:
    queue = pg_distlock.Queue(db.dsn, worker_id="c1")
    for i in range(5):
        queue.enqueue("batch", {"i": i})
    jobs = queue.consume(batch=10)
    assert len(jobs) == 5
    stale = Job(jobs[0].id, jobs[0].name, None, jobs[0].attempts + 7, 5, jobs[0].lease_expires_at, 0, "c1")
    assert queue.complete_many([stale, *jobs[1:]]) == {j.id for j in jobs[1:]}
    assert db.value("SELECT count(*) FROM distlock.jobs WHERE status = 'completed'") == 4


def test_enqueue_many_queues_one_job_per_payload_in_order(db: Db) -> None:
    queue = pg_distlock.Queue(db.dsn, worker_id="c1", queues=["bulk"])
    payloads = [{"n": 12345678901234567890}, None, [1, "two"]]
    ids = queue.enqueue_many("bulk-job", payloads, priority=3, max_attempts=2, queue="bulk")
    assert len(ids) == 3 and ids == sorted(ids)
    jobs = queue.consume(batch=10)
    assert [(j.id, j.name, j.payload, j.max_attempts) for j in jobs] == [
        (ids[0], "bulk-job", payloads[0], 2), (ids[1], "bulk-job", {}, 2), (ids[2], "bulk-job", payloads[2], 2)]
    assert queue.enqueue_many("bulk-job", [], queue="bulk") == []
    with pytest.raises(pg_distlock.InvalidArgument):
        queue.enqueue_many("bulk-job", {"not": "a list"})  # type: ignore[arg-type]


async def test_async_enqueue_many(db: Db) -> None:
    async with aio.Queue(db.dsn, worker_id="a1", queues=["bulk-async"]) as queue:
        ids = await queue.enqueue_many("bulk-job", [{"i": 1}, {"i": 2}], queue="bulk-async")
        jobs = await queue.consume(batch=10)
        assert [(j.id, j.payload) for j in jobs] == [(ids[0], {"i": 1}), (ids[1], {"i": 2})]


def consumer_query(db: Db, app: str) -> str | None:
    """The consumer's current (or, when idle, latest) claim statement (not
    the feature probe before it, which names consume_task too)."""
    value = db.value(
        "SELECT query FROM pg_stat_activity WHERE application_name = %s AND query LIKE '%%FROM distlock.consume_task%%'",
        app)
    return None if value is None else str(value)


@pytest.mark.parametrize("batch", [1, 3])
def test_consume_waits_for_a_job_enqueued_meanwhile(db: Db, server: str, batch: int, name: str) -> None:
    queue = pg_distlock.Queue(f"{db.dsn} application_name={name}", worker_id="waiter")
    found = server_features.parse(db.rows(server_features.SQL))
    in_server = server == "as-detected" and (found.consume_batch_wait if batch > 1 else found.consume_wait)
    got: list[list[Job]] = []
    started = time.monotonic()
    consumer = threading.Thread(target=lambda: got.append(queue.consume(batch=batch, wait=10)))
    consumer.start()
    query = str(eventually(lambda: consumer_query(db, name), timeout=5, what="the consumer's first call"))
    assert ("p_wait =>" in query) == in_server
    job_id = pg_distlock.Queue(db.dsn).enqueue("late")
    consumer.join(10)
    assert [j.id for j in got[0]] == [job_id]
    assert time.monotonic() - started < 5, "the consumer waited out its whole wait"


def test_consume_returns_nothing_after_its_wait(db: Db, server: str) -> None:
    started = time.monotonic()
    assert pg_distlock.Queue(db.dsn).consume(wait=0.5) == []
    assert 0.4 <= time.monotonic() - started < 3


@pytest.mark.parametrize("via_pooler", [False, True], ids=["direct", "pgbouncer"])
def test_worker_loop_completes_and_fails_in_batches(db: Db, server: str, via_pooler: bool) -> None:
    source = db.pooled_dsn if via_pooler else db.dsn
    producer = pg_distlock.Queue(source)
    ids = [producer.enqueue("work", {"i": i}, max_attempts=1) for i in range(12)]
    handled: list[int] = []

    def handler(job: Job) -> None:
        handled.append(job.payload["i"])
        if job.payload["i"] % 4 == 0:
            raise KeyError(job.payload["i"])

    stats = pg_distlock.QueueWorker(source, handler, batch=5, wait=0.2, exit_when_idle=True).run()
    assert sorted(handled) == list(range(12))
    assert (stats.claimed, stats.completed, stats.failed, stats.lost) == (12, 9, 3, 0)
    dead = db.rows("SELECT id, last_error FROM distlock.jobs WHERE status = 'dead' ORDER BY id")
    assert [r[0] for r in dead] == [ids[0], ids[4], ids[8]]
    assert dead[0][1] == "KeyError: 0"


def test_a_worker_reports_a_job_whose_lease_it_lost_and_does_not_settle_it(db: Db, server: str) -> None:
    """The handler outlives its lease (no heartbeat) and another consumer
    takes the job over: the worker's settle is refused, counted as lost."""
    job_id = pg_distlock.Queue(db.dsn).enqueue("slow")
    other = pg_distlock.Queue(db.dsn, worker_id="other", lease=60)
    taken: list[Job] = []

    def handler(job: Job) -> None:
        eventually(lambda: taken.extend(other.consume()) or bool(taken), timeout=10, what="the job taken over")

    stats = pg_distlock.QueueWorker(db.dsn, handler, lease=1, heartbeat=30, wait=0.2, exit_when_idle=True).run()
    assert [j.id for j in taken] == [job_id]
    assert (stats.claimed, stats.completed, stats.lost) == (1, 0, 1)
    assert status(db, job_id)[:2] == ("processing", 2), "the other consumer still holds it"


def test_consumers_and_workers_take_jobs_of_their_queues_only(db: Db, server: str) -> None:
    producer = pg_distlock.Queue(db.dsn)
    email = producer.enqueue("welcome", {"to": "a"}, queue="email")
    thumb = producer.enqueue("resize", {"image": 7}, priority=9, queue="thumbnails")
    plain = producer.enqueue("other")
    assert db.value("SELECT queue FROM distlock.jobs WHERE id = %s", plain) == "default"
    mailer = pg_distlock.Queue(db.dsn, worker_id="mailer", queues=["email"])
    [job] = mailer.consume(wait=0.2)
    assert job.id == email, "the higher-priority thumbnail job was handed to the e-mail consumer"
    assert mailer.consume(batch=5) == []
    handled: list[int] = []
    stats = pg_distlock.QueueWorker(
        db.dsn, lambda job: handled.append(job.id), queues=["thumbnails"], wait=0.2, exit_when_idle=True
    ).run()
    assert (handled, stats.completed) == ([thumb], 1)
    assert status(db, plain)[0] == "pending"
    for bad in ([], "email", [""], [None]):
        with pytest.raises(pg_distlock.InvalidArgument):
            pg_distlock.Queue(db.dsn, queues=bad)  # type: ignore[arg-type]


def test_a_unique_key_queues_one_unfinished_job(db: Db) -> None:
    queue = pg_distlock.Queue(db.dsn, worker_id="w", queues=["sync"])
    first = queue.enqueue("sync", {"account": 7}, queue="sync", unique_key="account:7")
    assert queue.enqueue("sync", {"account": 7}, queue="sync", unique_key="account:7") == first
    [job] = queue.consume()
    assert queue.complete(job)
    assert queue.enqueue("sync", {"account": 7}, queue="sync", unique_key="account:7") != first


def test_long_jobs_are_heartbeaten(db: Db) -> None:
    queue = pg_distlock.Queue(db.dsn)
    job_id = queue.enqueue("slow")

    def expiry() -> object:
        return db.value("SELECT lease_expires_at FROM distlock.jobs WHERE id = %s", job_id)

    def handler(job: Job) -> None:
        seen = {expiry()}
        eventually(lambda: seen.add(expiry()) or len(seen) >= 4, timeout=5, what="lease extensions")
        assert not job.lost.is_set()

    stats = pg_distlock.QueueWorker(db.dsn, handler, lease=0.6, exit_when_idle=True, wait=0).run()
    assert (stats.completed, stats.lost) == (1, 0)
    assert status(db, job_id)[:2] == ("completed", 1)


async def test_async_queue_has_the_same_shape(db: Db, server: str) -> None:
    queue = aio.Queue(db.dsn, worker_id="a1")
    for i in range(4):
        await queue.enqueue("async", {"i": i})
    [job] = await queue.consume()
    assert await queue.extend(job) and await queue.complete(job)
    seen: list[int] = []

    async def handler(job: Job) -> None:
        seen.append(job.payload["i"])

    stats = await aio.QueueWorker(db.dsn, handler, batch=2, wait=0.1, exit_when_idle=True).run()
    assert stats.completed == 3 and sorted(seen) == [1, 2, 3]
    await queue.close()
