"""Job.queue (pg_distlock 0.4.0, issue 47 item 6): each claimed job says the
queue it came from, from consume() (with and without waiting in the server),
consume(batch=...) and QueueWorker's settle_and_consume_tasks. Against a
database whose SQL is still 0.3.0's (no queue column), it is the consumer's
queue when it named exactly one, else None."""

from __future__ import annotations

from typing import Iterator

import pytest

import pg_distlock
from pg_distlock import Job
from conftest import Db, drop_database, new_database


@pytest.fixture
def db_0_3_0() -> Iterator[Db]:
    """A database created at 0.3.0's SQL, served by this library until an update."""
    db = new_database(version="0.3.0")
    yield db
    drop_database(db)


def worker_queues(db: Db, queues: list[str] | None) -> dict[int, str | None]:
    """What QueueWorker's handler sees of each job's queue."""
    seen: dict[int, str | None] = {}

    def handler(job: Job) -> None:
        seen[job.id] = job.queue

    stats = pg_distlock.QueueWorker(
        db.dsn, handler, concurrency=2, wait=0.2, exit_when_idle=True, handle_signals=False, queues=queues,
    ).run()
    assert stats.completed == len(seen)
    return seen


def test_each_claimed_job_says_its_queue(db: Db) -> None:
    producer = pg_distlock.Queue(db.dsn)
    queue = pg_distlock.Queue(db.dsn, worker_id="c1", queues=["email", "thumbs"])
    anywhere = pg_distlock.Queue(db.dsn, worker_id="c2")
    email = [producer.enqueue("mail", queue="email") for _ in range(3)]
    thumbs = [producer.enqueue("resize", queue="thumbs") for _ in range(2)]
    [first] = queue.consume()
    [second] = queue.consume(wait=1)
    [third] = anywhere.consume()
    rest = queue.consume(batch=10)
    got = {job.id: job.queue for job in [first, second, third, *rest]}
    assert got == {**{i: "email" for i in email}, **{i: "thumbs" for i in thumbs}}
    later = {producer.enqueue("mail", queue="email"): "email", producer.enqueue("resize", queue="thumbs"): "thumbs"}
    assert worker_queues(db, None) == later, "QueueWorker (settle_and_consume_tasks) hands each job with its queue"


def test_against_0_3_0_sql_the_queue_is_the_one_the_consumer_named(db_0_3_0: Db) -> None:
    db = db_0_3_0
    producer = pg_distlock.Queue(db.dsn)
    a = producer.enqueue("mail", queue="email")
    b = producer.enqueue("resize", queue="thumbs")
    c = producer.enqueue("resize", queue="thumbs")
    d = producer.enqueue("mail", queue="email")
    [one] = pg_distlock.Queue(db.dsn, worker_id="c1", queues=["email"]).consume(wait=1)
    assert (one.id, one.queue) == (a, "email")
    [unnamed] = pg_distlock.Queue(db.dsn, worker_id="c2").consume()
    assert (unnamed.id, unnamed.queue) == (b, None), "0.3.0 does not say a job's queue"
    [two] = pg_distlock.Queue(db.dsn, worker_id="c3", queues=["thumbs", "email"]).consume(batch=1)
    assert (two.id, two.queue) == (c, None)
    assert worker_queues(db, ["email"]) == {d: "email"}
