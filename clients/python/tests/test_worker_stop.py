"""Workers stop promptly: stop() (what SIGTERM calls) cancels an idle
QueueWorker's wait in the server; a statement_timeout shorter than the wait
is an idle round, not an error; stop(timeout) waits for the job at hand and
then cancels it, handing back the rest of its batch."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

import pg_distlock
from pg_distlock import Job, aio
from conftest import Db, eventually

NODE = str(Path(__file__).with_name("worker_node.py"))


def waiting_in_server(db: Db, app: str) -> bool:
    return bool(db.value(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query LIKE '%%p_wait%%'"
        " AND state = 'active'", app))


def test_stop_ends_an_idle_queue_worker_within_a_second(db: Db, name: str) -> None:
    worker = pg_distlock.QueueWorker(f"{db.dsn} application_name={name}", lambda job: None, wait=20)
    ran: list[pg_distlock.WorkerStats] = []
    thread = threading.Thread(target=lambda: ran.append(worker.run()))
    thread.start()
    eventually(lambda: waiting_in_server(db, name), timeout=10, what="the worker's wait in the server")
    stopped = time.monotonic()
    worker.stop()
    thread.join(5)
    assert not thread.is_alive() and ran, "the worker did not end"
    assert time.monotonic() - stopped < 1.0


def test_a_statement_timeout_shorter_than_the_wait_is_an_idle_round(db: Db, name: str) -> None:
    db.admin.execute(f"ALTER DATABASE {db.name} SET statement_timeout = '300ms'")
    worker = pg_distlock.QueueWorker(db.dsn, lambda job: None, wait=2, exit_when_idle=True)
    stats = worker.run()
    assert stats.claimed == 0


def job_states(db: Db) -> list[tuple]:
    return db.rows("SELECT task_name, status, coalesce(last_error, '') FROM distlock.jobs ORDER BY id")


def started_worker(db: Db, body: Callable[[Job], None], **options: Any) -> tuple[pg_distlock.QueueWorker, threading.Thread]:
    """A QueueWorker running in a thread of its own, once `body` has begun on a job."""
    started = threading.Event()

    def handler(job: Job) -> None:
        started.set()
        body(job)

    worker = pg_distlock.QueueWorker(db.dsn, handler, wait=20, handle_signals=False, **options)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    assert started.wait(10)
    return worker, thread


def test_stop_with_a_timeout_waits_for_the_job_at_hand(db: Db) -> None:
    pg_distlock.Queue(db.dsn).enqueue("slow")
    worker, thread = started_worker(db, lambda job: time.sleep(0.5))
    assert worker.stop(timeout=10) is True
    thread.join(1)
    assert not thread.is_alive()
    assert job_states(db) == [("slow", "completed", "")]


def test_stop_with_a_timeout_cancels_a_handler_that_outlasts_it_and_hands_back_its_batch(db: Db) -> None:
    queue = pg_distlock.Queue(db.dsn)
    for n in range(3):
        queue.enqueue(f"job-{n}")

    def gives_up_when_cancelled(job: Job) -> None:
        if job.cancelled.wait(30):
            raise RuntimeError("gave up: the worker is stopping")

    worker, thread = started_worker(db, gives_up_when_cancelled, batch=3)
    began = time.monotonic()
    assert worker.stop(timeout=0.3) is True
    assert time.monotonic() - began < 2.0
    thread.join(1)
    assert not thread.is_alive()
    assert job_states(db) == [
        ("job-0", "failed", "RuntimeError: gave up: the worker is stopping"),
        ("job-1", "failed", "not started: the worker was stopped"),
        ("job-2", "failed", "not started: the worker was stopped"),
    ]
    assert (worker.stats.completed, worker.stats.failed, worker.stats.lost) == (0, 3, 0)


def test_stop_with_a_timeout_returns_false_while_a_handler_ignores_the_cancellation(db: Db) -> None:
    pg_distlock.Queue(db.dsn).enqueue("stubborn")
    release = threading.Event()
    worker, thread = started_worker(db, lambda job: release.wait(30) and None)
    assert worker.stop(timeout=0.2) is False
    release.set()
    thread.join(10)
    assert job_states(db) == [("stubborn", "completed", "")]


async def test_async_stop_with_a_timeout_cancels_the_handler(db: Db) -> None:
    pg_distlock.Queue(db.dsn).enqueue("sleepy")
    started = asyncio.Event()

    async def handler(job: Job) -> None:
        started.set()
        await asyncio.sleep(60)

    worker = aio.QueueWorker(db.dsn, handler, wait=20, handle_signals=False)
    run = asyncio.ensure_future(worker.run())
    await asyncio.wait_for(started.wait(), 10)
    assert await worker.stop(timeout=0.2) is True
    stats = await asyncio.wait_for(run, 5)
    assert (stats.completed, stats.failed) == (0, 1)
    [(name, status, error)] = job_states(db)
    assert (name, status) == ("sleepy", "failed") and error.startswith("HandlerCancelled")


def test_stop_with_a_timeout_releases_a_task_claim_as_failed(db: Db) -> None:
    [task] = db.add_tasks(1)
    started = threading.Event()

    def handler(claim: pg_distlock.TaskClaim) -> None:
        started.set()
        if claim.cancelled.wait(30):
            raise RuntimeError("cancelled by stop")

    worker = pg_distlock.TaskWorker(db.dsn, handler, poll_interval=20, handle_signals=False)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    assert started.wait(10)
    assert worker.stop(timeout=0.2) is True
    thread.join(1)
    assert not thread.is_alive()
    assert db.rows("SELECT task_id, status, error_message FROM distlock.task_execution_log") == [
        (task, "failed", "RuntimeError: cancelled by stop")]


class Node:
    """A worker process (worker_node.py) that the test signals."""

    def __init__(self, db: Db, kind: str, app: str, handler_seconds: float = 0.0, *extra: object) -> None:
        self.process = subprocess.Popen(
            [sys.executable, NODE, db.dsn, kind, app, str(handler_seconds), *map(str, extra)],
            stdout=subprocess.PIPE, text=True,
        )

    def line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def terminate_and_time(self) -> tuple[float, dict[str, int]]:
        began = time.monotonic()
        os.kill(self.process.pid, signal.SIGTERM)
        out, _ = self.process.communicate(timeout=20)
        elapsed = time.monotonic() - began
        assert self.process.returncode == 0, out
        return elapsed, json.loads(out.strip().splitlines()[-1])

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()


def backend_state(db: Db, app: str) -> str | None:
    rows = db.rows("SELECT state, query FROM pg_stat_activity WHERE application_name = %s", app)
    return None if not rows else f"{rows[0][0]}: {rows[0][1]}"


@pytest.mark.parametrize("kind, idle", [
    ("queue", lambda state: state.startswith("active") and "p_wait" in state),
    # Idle, its last statement the fetch or (a server that tells, 0.4.0) the ask how long to sleep.
    ("task", lambda state: state.startswith("idle") and ("worker_fetch_and_execute_task" in state or "next_task_wait" in state)),
], ids=["QueueWorker", "TaskWorker"])
def test_sigterm_ends_an_idle_worker_process_within_a_second(db: Db, name: str, kind: str, idle: object) -> None:
    node = Node(db, kind, name)
    try:
        eventually(lambda: (state := backend_state(db, name)) and idle(state),  # type: ignore[operator]
                   timeout=15, what=f"the {kind} worker waiting for work")
        elapsed, stats = node.terminate_and_time()
    finally:
        node.kill()
    assert stats["claimed"] == 0
    assert elapsed < 1.0, f"the idle worker took {elapsed:.2f} s to end after SIGTERM"


def test_sigterm_lets_a_worker_process_finish_the_job_at_hand(db: Db, name: str) -> None:
    job_id = pg_distlock.Queue(db.dsn).enqueue("at-hand")
    node = Node(db, "queue", name, handler_seconds=1.5)
    try:
        assert node.line() == f"started {job_id}"
        elapsed, stats = node.terminate_and_time()
    finally:
        node.kill()
    assert (stats["claimed"], stats["completed"]) == (1, 1)
    assert job_states(db) == [("at-hand", "completed", "")]
    assert elapsed < 2.5


def test_a_worker_killed_mid_batch_loses_no_job_and_settles_none_twice(db: Db, name: str) -> None:
    """SIGKILL of a QueueWorker process in the middle of a batch: the jobs
    it had settled stay settled and are not run again; the rest of its
    batch is taken over once the leases run out and completed by another
    worker."""
    producer = pg_distlock.Queue(db.dsn)
    jobs = {producer.enqueue("work", {"i": i}) for i in range(40)}
    node = Node(db, "queue", name, 0.02, 8, 2)
    try:
        eventually(lambda: db.value("SELECT count(*) FROM distlock.jobs WHERE status = 'completed'") >= 8,
                   timeout=20, what="the first batches settled")
        node.line()  # a handler is at work now
        node.kill()
    finally:
        node.kill()
    settled_before = {r[0] for r in db.rows("SELECT id FROM distlock.jobs WHERE status = 'completed'")}
    held = db.value("SELECT count(*) FROM distlock.jobs WHERE status = 'processing'")
    assert settled_before and held > 0, "the worker was killed between batches: the test proves nothing"
    handled: list[int] = []
    stats = pg_distlock.QueueWorker(db.dsn, lambda job: handled.append(job.id), batch=8, lease=2, wait=5,
                                    exit_when_idle=True).run()
    assert not set(handled) & settled_before, "a job settled before the kill ran again"
    assert set(handled) | settled_before == jobs, "a job was lost"
    assert len(handled) == len(set(handled)) == stats.completed
    assert db.value("SELECT count(*) FROM distlock.jobs WHERE status <> 'completed'") == 0
