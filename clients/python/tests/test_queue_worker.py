"""QueueWorker with concurrency: handlers run side by side, jobs are claimed
ahead up to the worker's capacity, finished jobs are settled in batches
(by the next claim, or by the completer while the worker waits for work),
and a handler may complete its job in its own transaction."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import psycopg
import pytest

import pg_distlock
from pg_distlock import Job, aio
from conftest import Db, connect, eventually
from test_worker_stop import Node


def statuses(db: Db) -> dict[str, int]:
    return dict(db.rows("SELECT status, count(*) FROM distlock.jobs GROUP BY status"))  # type: ignore[arg-type]


def run_in_thread(worker: pg_distlock.QueueWorker) -> tuple[threading.Thread, list[pg_distlock.WorkerStats]]:
    ran: list[pg_distlock.WorkerStats] = []
    thread = threading.Thread(target=lambda: ran.append(worker.run()), daemon=True)
    thread.start()
    return thread, ran


def test_handlers_run_up_to_the_concurrency_at_once(db: Db) -> None:
    producer = pg_distlock.Queue(db.dsn)
    for i in range(8):
        producer.enqueue("side-by-side", {"i": i})
    # Each handler waits for three others: with fewer at once, none returns.
    together = threading.Barrier(4, timeout=10)
    stats = pg_distlock.QueueWorker(
        db.dsn, lambda job: together.wait(), concurrency=4, wait=0.2, exit_when_idle=True, handle_signals=False,
    ).run()
    assert (stats.claimed, stats.completed, stats.failed) == (8, 8, 0)
    assert statuses(db) == {"completed": 8}


def test_a_worker_claims_ahead_up_to_its_capacity_and_no_further(db: Db) -> None:
    producer = pg_distlock.Queue(db.dsn)
    for i in range(10):
        producer.enqueue("held", {"i": i})
    release = threading.Event()
    started: list[int] = []
    worker = pg_distlock.QueueWorker(
        db.dsn, lambda job: started.append(job.id) or release.wait(20), concurrency=2, batch=3, wait=20,
        handle_signals=False,
    )
    thread, ran = run_in_thread(worker)
    try:
        eventually(lambda: len(started) == 2, what="two handlers at work")
        # Two running and one claimed ahead: three of the ten are the worker's.
        assert statuses(db) == {"processing": 3, "pending": 7}
    finally:
        release.set()
        worker.stop()
        thread.join(20)
    assert ran and ran[0].completed == ran[0].claimed >= 3


def test_a_job_finished_while_the_worker_waits_for_work_is_settled_meanwhile(db: Db) -> None:
    producer = pg_distlock.Queue(db.dsn)
    quick = producer.enqueue("quick")
    slow = producer.enqueue("slow")
    release = threading.Event()

    def handler(job: Job) -> None:
        if job.id == slow:
            release.wait(20)

    # The worker holds both and waits 20 s in the server for a third: the
    # quick job's completion must not wait for that wait or the slow job.
    worker = pg_distlock.QueueWorker(db.dsn, handler, concurrency=3, wait=20, handle_signals=False)
    thread, ran = run_in_thread(worker)
    try:
        eventually(lambda: db.value("SELECT status FROM distlock.jobs WHERE id = %s", quick) == "completed",
                   timeout=5, what="the quick job settled while the slow one runs")
        assert db.value("SELECT status FROM distlock.jobs WHERE id = %s", slow) == "processing"
    finally:
        release.set()
        worker.stop()
        thread.join(20)
    assert ran and (ran[0].completed, ran[0].lost) == (2, 0)
    assert statuses(db) == {"completed": 2}


def test_many_jobs_at_high_concurrency_are_each_completed_once(db: Db) -> None:
    db.admin.execute(
        "INSERT INTO distlock.task_queue (task_name, payload) SELECT 'bulk', jsonb_build_object('i', g)"
        " FROM generate_series(1, 2000) g")
    seen: list[int] = []
    failing = {7, 700, 1400}

    def handler(job: Job) -> None:
        seen.append(job.payload["i"])
        if job.payload["i"] in failing:
            raise RuntimeError("fails: retried after its backoff, beyond this run")

    stats = pg_distlock.QueueWorker(db.dsn, handler, concurrency=16, wait=0.3, exit_when_idle=True,
                                    handle_signals=False).run()
    assert sorted(seen) == list(range(1, 2001))
    assert (stats.completed, stats.failed, stats.lost) == (2000 - 3, 3, 0)
    assert statuses(db) == {"completed": 1997, "failed": 3}


@pytest.fixture
def effects(db: Db) -> Db:
    db.admin.execute("CREATE TABLE public.effects (job_id bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())")
    return db


def effect_counts(db: Db) -> dict[int, int]:
    return dict(db.rows("SELECT job_id, count(*) FROM public.effects GROUP BY job_id"))  # type: ignore[arg-type]


def test_a_handler_completes_its_job_in_its_own_transaction(effects: Db) -> None:
    db = effects
    producer = pg_distlock.Queue(db.dsn)
    ok = producer.enqueue("writes", {"fail_after_complete": False})
    flaky = producer.enqueue("writes", {"fail_after_complete": True})

    def handler(job: Job) -> None:
        with connect(db.dsn) as conn, conn.transaction():
            conn.execute("INSERT INTO public.effects (job_id) VALUES (%s)", (job.id,))
            pg_distlock.complete_in_transaction(conn, job)
            if job.payload["fail_after_complete"] and job.attempts == 1:
                raise RuntimeError("after the completion, before the commit")

    stats = pg_distlock.QueueWorker(db.dsn, handler, concurrency=2, wait=0.2, exit_when_idle=True,
                                    handle_signals=False).run()
    # The failed attempt's write and completion rolled back together; the
    # retry (run at once: its backoff is below the worker's wait) did both.
    db.admin.execute("UPDATE distlock.task_queue SET run_after = now() WHERE status = 'failed'")
    stats2 = pg_distlock.QueueWorker(db.dsn, handler, wait=0.2, exit_when_idle=True, handle_signals=False).run()
    assert (stats.completed, stats.failed, stats2.completed) == (1, 1, 1)
    assert effect_counts(db) == {ok: 1, flaky: 1}
    assert db.rows("SELECT id, status, attempts FROM distlock.jobs ORDER BY id") == [
        (ok, "completed", 1), (flaky, "completed", 2)]


def test_complete_in_transaction_refuses_a_lost_attempt_and_a_connection_without_transaction(effects: Db) -> None:
    db = effects
    job_id = pg_distlock.Queue(db.dsn).enqueue("taken-over")
    mine = pg_distlock.Queue(db.dsn, worker_id="mine", lease=0.2)
    [job] = mine.consume()
    conn = connect(db.dsn)
    with pytest.raises(pg_distlock.InvalidArgument, match="transaction open"):
        pg_distlock.complete_in_transaction(conn, job)
    eventually(lambda: pg_distlock.Queue(db.dsn, worker_id="other").consume(), what="the job taken over")
    with pytest.raises(pg_distlock.LeaseLost, match=f"job {job_id} attempt 1"):
        with conn.transaction():
            conn.execute("INSERT INTO public.effects (job_id) VALUES (%s)", (job.id,))
            pg_distlock.complete_in_transaction(conn, job)
    assert effect_counts(db) == {}
    assert db.rows("SELECT status, attempts, worker_id FROM distlock.jobs") == [("processing", 2, "other")]


def test_a_worker_killed_while_handlers_commit_their_jobs_runs_each_effect_once(effects: Db, name: str) -> None:
    """SIGKILL of a QueueWorker process running four handlers that each
    write an effect and complete their job in one transaction: the jobs
    taken over afterwards are exactly those with no effect, and every job
    ends with exactly one effect."""
    db = effects
    producer = pg_distlock.Queue(db.dsn)
    # Enough work left after the first effects (about 2 s of it) that the
    # kill lands while handlers hold jobs, however late the poll sees them.
    jobs = {producer.enqueue("effect", {"i": i}) for i in range(200)}
    node = Node(db, "queue-tx", name, 0.05, 4, 2, 4)
    try:
        eventually(lambda: db.value("SELECT count(*) FROM public.effects") >= 12, timeout=20,
                   what="the first effects committed")
        node.line()  # handlers are at work now
        node.kill()
    finally:
        node.kill()
    held = db.value("SELECT count(*) FROM distlock.jobs WHERE status = 'processing'")
    assert held > 0, "the worker was killed with no job in hand: the test proves nothing"
    before = effect_counts(db)
    conn_by_thread = threading.local()

    def handler(job: Job) -> None:
        if not hasattr(conn_by_thread, "conn"):
            conn_by_thread.conn = connect(db.dsn)
        conn = conn_by_thread.conn
        with conn.transaction():
            conn.execute("INSERT INTO public.effects (job_id) VALUES (%s)", (job.id,))
            pg_distlock.complete_in_transaction(conn, job)

    stats = pg_distlock.QueueWorker(db.dsn, handler, concurrency=4, lease=2, wait=5, exit_when_idle=True,
                                    handle_signals=False).run()
    after = effect_counts(db)
    assert set(after) == jobs and set(after.values()) == {1}, "a job ran its effect twice or never"
    assert stats.completed == len(jobs) - len(before)
    assert statuses(db) == {"completed": len(jobs)}


async def test_async_handlers_run_side_by_side_and_complete_in_their_transaction(effects: Db) -> None:
    db = effects
    producer = aio.Queue(db.dsn)
    for i in range(6):
        await producer.enqueue("async", {"i": i})
    together = asyncio.Barrier(3)
    conns: list[psycopg.AsyncConnection[Any]] = []

    async def handler(job: Job) -> None:
        await asyncio.wait_for(together.wait(), 10)
        conn = await psycopg.AsyncConnection.connect(db.dsn, autocommit=True)
        conns.append(conn)
        async with conn.transaction():
            await conn.execute("INSERT INTO public.effects (job_id) VALUES (%s)", (job.id,))
            await aio.complete_in_transaction(conn, job)

    stats = await aio.QueueWorker(db.dsn, handler, concurrency=3, wait=0.2, exit_when_idle=True,
                                  handle_signals=False).run()
    for conn in conns:
        await conn.close()
    assert (stats.claimed, stats.completed, stats.failed) == (6, 6, 0)
    assert set(effect_counts(db).values()) == {1} and len(effect_counts(db)) == 6
    assert statuses(db) == {"completed": 6}
    await producer.close()


def test_a_worker_waiting_for_work_holds_back_no_vacuum_horizon(db: Db) -> None:
    """The worker's waiting call is a statement of its own on an autocommit
    connection, which the server lets sleep without an xmin: vacuum can
    remove the row versions that die while a fleet waits."""
    handled: list[int] = []
    worker = pg_distlock.QueueWorker(db.dsn, lambda job: handled.append(job.id), concurrency=2, wait=30,
                                     handle_signals=False)
    thread, ran = run_in_thread(worker)
    try:
        asleep = "SELECT backend_xmin IS NULL FROM pg_stat_activity" \
                 " WHERE datname = current_database() AND wait_event_type = 'Extension'"
        eventually(lambda: db.rows(asleep) == [(True,)], timeout=10, what="the worker asleep in the server without an xmin")
        job_id = pg_distlock.Queue(db.dsn).enqueue("wake")
        eventually(lambda: handled == [job_id], timeout=10, what="the job that woke it handled")
    finally:
        worker.stop()
        thread.join(20)
    assert ran and ran[0].completed == 1


def skip_claims_of(db: Db, task_name: str) -> None:
    """A trigger that turns down every claim of jobs named `task_name` (a
    claim deletes the job's runnable version): a look locks such a job and
    returns nothing, as one that met a job changed after its snapshot does,
    and the server returns before its wait is over rather than sleep with
    the transaction id that lock gave it."""
    db.admin.execute(
        "CREATE FUNCTION public.skip_delete() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$")
    db.admin.execute(
        "CREATE TRIGGER skip_claims BEFORE DELETE ON distlock.task_queue FOR EACH ROW"
        f" WHEN (OLD.task_name = '{task_name}') EXECUTE FUNCTION public.skip_delete()")


def test_consume_waits_out_its_wait_when_the_server_returns_early(db: Db) -> None:
    skip_claims_of(db, "decoy")
    queue = pg_distlock.Queue(db.dsn)
    queue.enqueue("decoy")
    started = time.monotonic()
    assert queue.consume(wait=0.5) == []
    assert time.monotonic() - started >= 0.5


def test_a_worker_that_exits_when_idle_is_not_idle_when_the_server_returns_early(db: Db) -> None:
    skip_claims_of(db, "decoy")
    producer = pg_distlock.Queue(db.dsn)
    producer.enqueue("decoy")
    started = time.monotonic()
    stats = pg_distlock.QueueWorker(db.dsn, lambda job: None, wait=0.5, exit_when_idle=True,
                                    handle_signals=False).run()
    assert time.monotonic() - started >= 0.5
    assert stats.claimed == 0
