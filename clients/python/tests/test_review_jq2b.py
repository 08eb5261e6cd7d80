"""Review of jq2 (1862aeb): the client reads claimed rows by column name
(Execute.named, a dict_row cursor) and every other statement on the
connection's own cursor. A connection, or a pool's connections, that the
application made with a row factory of its own (dict_row is the usual
choice of an application on psycopg 3) is handed to the client as its
source: the claim statements get their dicts, but every other statement
gets the application's rows where the client indexes tuples. Each test
fails on 1862aeb."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

import pg_distlock
from pg_distlock import Job, aio
from conftest import Db


def test_a_queue_on_the_applications_dict_row_connection_enqueues_claims_and_completes(db: Db) -> None:
    """enqueue, consume and complete on a connection made with
    row_factory=dict_row: the claim (read by name) is not where it ends."""
    conn = psycopg.connect(db.dsn, autocommit=True, row_factory=dict_row)
    try:
        queue = pg_distlock.Queue(conn, worker_id="w1")
        try:
            queued = queue.enqueue("dict-rows", {"n": 1})
            jobs = queue.consume()
            done = queue.complete(jobs[0])
        except Exception as exc:  # noqa: BLE001 - the failure is the finding
            pytest.fail(f"Queue on a dict_row connection fails: {type(exc).__name__}: {exc!r}")
        assert [job.id for job in jobs] == [queued] and done
    finally:
        conn.close()


def test_a_queue_worker_on_a_pool_of_dict_row_connections_completes_its_jobs(db: Db) -> None:
    """QueueWorker (settle_and_consume_tasks, read by name) on a pool whose
    connections the application configured with row_factory=dict_row."""
    from psycopg_pool import ConnectionPool

    for i in range(3):
        db.value("SELECT distlock.enqueue_task('pooled', jsonb_build_object('i', %s::int))", i)
    handled: list[int] = []
    with ConnectionPool(db.dsn, min_size=1, max_size=4, kwargs={"autocommit": True, "row_factory": dict_row}) as pool:
        try:
            stats = pg_distlock.QueueWorker(
                pool, lambda job: handled.append(job.id), concurrency=2, wait=0.2, exit_when_idle=True,
                handle_signals=False,
            ).run()
        except Exception as exc:  # noqa: BLE001 - the failure is the finding
            pytest.fail(f"QueueWorker on a pool of dict_row connections fails: {type(exc).__name__}: {exc!r}")
    assert (stats.claimed, stats.completed, stats.failed) == (3, 3, 0)
    assert db.rows("SELECT status, count(*)::int FROM distlock.jobs GROUP BY status") == [("completed", 3)]


def test_complete_in_transaction_on_the_applications_dict_row_connection(db: Db) -> None:
    """A handler completes its job in its own transaction on the
    application's connection (row_factory=dict_row): the completion's row
    is read as completed[0], a KeyError on a dict, after the job's
    completion ran in the handler's transaction."""
    db.value("SELECT distlock.enqueue_task('own-xact', '{}'::jsonb)")
    job: Job = pg_distlock.Queue(db.dsn, worker_id="w1").consume()[0]
    conn = psycopg.connect(db.dsn, row_factory=dict_row)
    try:
        with conn.transaction():
            try:
                pg_distlock.complete_in_transaction(conn, job)
            except Exception as exc:  # noqa: BLE001 - the failure is the finding
                pytest.fail(f"complete_in_transaction on a dict_row connection: {type(exc).__name__}: {exc!r}")
        assert job.completed_in_transaction
    finally:
        conn.close()
    assert db.value("SELECT status FROM distlock.jobs") == "completed"


async def test_an_async_queue_on_the_applications_dict_row_connection(db: Db) -> None:
    """The asyncio twin of the first test."""
    conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(
        db.dsn, autocommit=True, row_factory=dict_row)
    try:
        queue = aio.Queue(conn, worker_id="w1")
        try:
            queued = await queue.enqueue("dict-rows", {"n": 1})
            jobs = await queue.consume()
            done = await queue.complete(jobs[0])
        except Exception as exc:  # noqa: BLE001 - the failure is the finding
            pytest.fail(f"aio.Queue on a dict_row connection fails: {type(exc).__name__}: {exc!r}")
        assert [job.id for job in jobs] == [queued] and done
    finally:
        await conn.close()
