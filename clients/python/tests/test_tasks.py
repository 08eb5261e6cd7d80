from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import pg_distlock
from pg_distlock import TaskClaim, aio
from conftest import Db, eventually

MODES = ["session", "lease"]


def runs(db: Db) -> list[tuple]:
    return db.rows(
        "SELECT task_id, status, fencing_token, error_message, worker_id FROM distlock.task_execution_log ORDER BY id")


@pytest.mark.parametrize("mode", MODES)
def test_each_due_task_runs_once_with_its_fencing_token(db: Db, mode: str) -> None:
    ids = db.add_tasks(5)
    seen: list[tuple[int, int]] = []
    worker = pg_distlock.TaskWorker(
        db.dsn, lambda claim: seen.append((claim.task_id, claim.token)), worker_id="w1", mode=mode,
        exit_when_idle=True,
    )
    stats = worker.run()
    assert sorted(t for t, _ in seen) == sorted(ids)
    assert (stats.claimed, stats.completed, stats.failed, stats.lost) == (5, 5, 0, 0)
    assert sorted((t, "completed", token) for t, token in seen) == sorted(r[:3] for r in runs(db))


@pytest.mark.parametrize("mode", MODES)
def test_a_worker_ends_each_run_and_claims_the_next_in_one_call(db: Db, mode: str) -> None:
    """Back to back, a run's release also claims the next due task
    (release_and_fetch_task): one statement and one commit per run."""
    db.add_tasks(4)
    claimed_by: list[str] = []

    def handler(claim: TaskClaim) -> None:
        # While the handler runs, the worker's connection is idle and its
        # last statement is the one that claimed this task.
        claimed_by.append(str(db.value(
            "SELECT query FROM pg_stat_activity WHERE application_name = %s AND query LIKE %s"
            " ORDER BY state_change DESC LIMIT 1",
            f"pg_distlock:task_worker:fused-{mode}", "%fetch%task%",
        )))

    stats = pg_distlock.TaskWorker(db.dsn, handler, worker_id=f"fused-{mode}", mode=mode, exit_when_idle=True).run()
    assert (stats.claimed, stats.completed, stats.failed, stats.lost) == (4, 4, 0, 0)
    assert ["release_and_fetch_task" in query for query in claimed_by] == [False, True, True, True], claimed_by
    assert [r[1] for r in runs(db)] == ["completed"] * 4


@pytest.mark.parametrize("mode", MODES)
def test_a_failing_handler_releases_failed_with_the_error_text(db: Db, mode: str) -> None:
    [task] = db.add_tasks(1)

    def handler(claim: TaskClaim) -> None:
        raise ValueError(f"boom in {claim.task_name}")

    stats = pg_distlock.TaskWorker(db.dsn, handler, mode=mode, exit_when_idle=True, max_tasks=1).run()
    assert (stats.completed, stats.failed) == (0, 1)
    [(task_id, status, _, error, _)] = runs(db)
    assert (task_id, status) == (task, "failed")
    assert error == "ValueError: boom in task-1"


def test_auto_mode_takes_lease_claims_when_the_server_offers_them(db: Db) -> None:
    db.add_tasks(1)
    modes: list[str] = []
    pg_distlock.TaskWorker(db.dsn, lambda c: modes.append(c.mode), exit_when_idle=True).run()
    offered = db.value("SELECT count(*) > 0 FROM pg_proc WHERE proname = 'try_acquire_task_lease'")
    assert modes == ["lease" if offered else "session"]


def test_long_tasks_are_heartbeaten(db: Db) -> None:
    [task] = db.add_tasks(1)

    def expiry() -> object:
        return db.value("SELECT lease_expires_at FROM distlock.scheduled_tasks WHERE id = %s", task)

    def handler(claim: TaskClaim) -> None:
        seen = {expiry()}
        # The work lasts as long as three renewals, several times the lease.
        eventually(lambda: seen.add(expiry()) or len(seen) >= 4, timeout=5, what="heartbeats")
        claim.check()

    stats = pg_distlock.TaskWorker(db.dsn, handler, mode="lease", lease=0.6, exit_when_idle=True).run()
    assert (stats.completed, stats.lost) == (1, 0)
    assert [r[1] for r in runs(db)] == ["completed"]


@pytest.mark.parametrize("mode", MODES)
def test_the_handler_learns_when_the_sweep_takes_its_claim(db: Db, mode: str) -> None:
    [task] = db.add_tasks(1, timeout="1 second")
    lost: list[str] = []

    def sweep() -> bool:
        return bool(db.rows("SELECT * FROM distlock.check_and_recover_timeout_tasks()"))

    def handler(claim: TaskClaim) -> None:
        eventually(sweep, timeout=10, what="the sweep to time the run out")
        assert claim.lost.wait(5), "the worker did not notice its claim was gone"

    stats = pg_distlock.TaskWorker(
        db.dsn, handler, mode=mode, lease=3, heartbeat=0.1, exit_when_idle=True, max_tasks=1, on_lost=lost.append,
    ).run()
    assert (stats.completed, stats.lost) == (0, 1)
    assert [r[1] for r in runs(db)] == ["timed_out"]
    assert lost


def test_lease_mode_works_through_a_transaction_pooler(db: Db) -> None:
    db.add_tasks(6)
    stats = pg_distlock.TaskWorker(db.pooled_dsn, lambda c: None, mode="lease", exit_when_idle=True).run()
    assert stats.completed == 6
    assert {r[1] for r in runs(db)} == {"completed"}


WORKER = textwrap.dedent("""
    import json, pathlib, sys, time
    import pg_distlock
    dsn, started, go = sys.argv[1], pathlib.Path(sys.argv[2]), pathlib.Path(sys.argv[3])

    def handler(claim):
        started.write_text(str(claim.task_id))
        deadline = time.monotonic() + 20
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.01)

    stats = pg_distlock.TaskWorker(dsn, handler, worker_id="signalled").run()
    print(json.dumps(stats.__dict__))
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_the_worker_between_tasks(db: Db, tmp_path: Path, sig: signal.Signals) -> None:
    db.add_tasks(3)
    started, go = tmp_path / "started", tmp_path / "go"
    proc = subprocess.Popen([sys.executable, "-c", WORKER, db.dsn, str(started), str(go)],
                            stdout=subprocess.PIPE, text=True)
    try:
        eventually(started.exists, timeout=15, what="the first task to start")
        os.kill(proc.pid, sig)
        go.touch()
        out, _ = proc.communicate(timeout=20)
    finally:
        proc.kill()
    assert proc.returncode == 0
    assert '"completed": 1' in out
    assert [r[1] for r in runs(db)] == ["completed"]
    assert db.value("SELECT count(*) FROM distlock.scheduled_tasks WHERE next_run_at <= now()") == 2


def test_stop_from_another_thread(db: Db) -> None:
    db.add_tasks(2)
    worker: pg_distlock.TaskWorker

    def handler(claim: TaskClaim) -> None:
        threading.Thread(target=worker.stop).start()
        assert claim.stopping.wait(5)

    worker = pg_distlock.TaskWorker(db.dsn, handler, handle_signals=False)
    assert worker.run().completed == 1


@pytest.mark.parametrize("mode", MODES)
async def test_async_worker_has_the_same_shape(db: Db, mode: str) -> None:
    db.add_tasks(4)
    seen: list[int] = []

    async def handler(claim: TaskClaim) -> None:
        seen.append(claim.token)
        if len(seen) == 2:
            raise RuntimeError("second one fails")

    stats = await aio.TaskWorker(db.dsn, handler, mode=mode, exit_when_idle=True).run()
    assert (stats.completed, stats.failed) == (3, 1)
    assert sorted(r[2] for r in runs(db)) == sorted(seen)


def test_a_session_worker_reconnects_after_its_connection_is_killed(db: Db) -> None:
    first, second = db.add_tasks(2)
    killed: list[int] = []

    def handler(claim: TaskClaim) -> None:
        if claim.task_id == first and not killed:
            killed.append(claim.token)
            pid = db.value("SELECT holder_pid FROM distlock.running_tasks WHERE task_id = %s", claim.task_id)
            db.value("SELECT pg_terminate_backend(%s)", pid)
            assert claim.lost.wait(5), "the claim's connection died unnoticed"

    worker = pg_distlock.TaskWorker(db.dsn, handler, mode="session", heartbeat=0.1, exit_when_idle=True)
    stats = worker.run()
    # The lost slot is still due and is claimed again on the new connection.
    assert (stats.claimed, stats.completed, stats.lost, stats.reconnects) == (3, 2, 1, 1)
    assert [r[0] for r in db.rows("SELECT task_id FROM distlock.check_and_recover_timeout_tasks()")] == [first]
    assert sorted((r[0], r[1]) for r in runs(db)) == [(first, "abandoned"), (first, "completed"), (second, "completed")]


@pytest.mark.parametrize("mode", MODES)
def test_an_idle_worker_wakes_when_the_next_task_comes_due_not_at_its_poll_interval(db: Db, mode: str) -> None:
    # Due in 1.5 s; the worker polls every 8 s at most: it sleeps until the task is due.
    task = db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, next_run_at)"
                    " VALUES ('soon', 'test', clock_timestamp() + interval '1.5 seconds') RETURNING id")
    worker = pg_distlock.TaskWorker(db.dsn, lambda claim: None, worker_id="w1", mode=mode, poll_interval=8.0,
                                    max_tasks=1)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    late = db.value("SELECT extract(epoch FROM l.started_at - l.scheduled_for)::float8"
                    " FROM distlock.task_execution_log l WHERE l.task_id = %s", task)
    assert isinstance(late, float) and 0 <= late < 1.5, f"claimed {late} s after it was due"
