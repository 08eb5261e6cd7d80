"""A worker reconnects to a promoted standby and finishes its claim there.
Runs last: it ends the primary."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

import pg_distlock
from pg_distlock import TaskClaim, WorkerStats
from conftest import PRIMARY, STANDBY, Db, connect, dsn, eventually, on_standby

PG_CTL = os.path.join(os.environ.get("DISTLOCK_PY_PGBIN", "/usr/lib/postgresql/15/bin"), "pg_ctl")


def pg_ctl(*args: str) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", PG_CTL, *args], check=True, capture_output=True, timeout=60)


@pytest.mark.failover
def test_a_lease_mode_worker_finishes_its_task_on_the_promoted_standby(db: Db) -> None:
    primary_dir = os.environ.get("DISTLOCK_PY_PRIMARY_PGDATA")
    standby_dir = os.environ.get("DISTLOCK_PY_STANDBY_PGDATA")
    if not (primary_dir and standby_dir):
        pytest.skip("needs the data directories of scripts/test_python.sh's clusters")
    ids = db.add_tasks(3)
    both = (f"host=127.0.0.1,127.0.0.1 port={PRIMARY},{STANDBY} user=postgres dbname={db.name}"
            " target_session_attrs=read-write connect_timeout=2")
    started, go = threading.Event(), threading.Event()
    tokens: dict[int, int] = {}

    def handler(claim: TaskClaim) -> None:
        tokens[claim.task_id] = claim.token
        if len(tokens) == 1:
            started.set()
            assert go.wait(30)
        claim.check()

    worker = pg_distlock.TaskWorker(both, handler, worker_id="survivor", mode="lease", lease=20, exit_when_idle=True)
    result: list[WorkerStats] = []
    thread = threading.Thread(target=lambda: result.append(worker.run()))
    thread.start()
    try:
        assert started.wait(15)
        # The claim must have reached the standby before the primary dies.
        eventually(lambda: on_standby(db, "SELECT count(*) FROM distlock.task_execution_log WHERE status = 'running'") == 1,
                   timeout=10, what="the claim on the standby")
        pg_ctl("stop", "-D", primary_dir, "-m", "immediate", "-w")
        pg_ctl("promote", "-D", standby_dir, "-w")
    finally:
        go.set()
        thread.join(60)
    assert result, "the worker did not finish"
    stats = result[0]
    assert (stats.completed, stats.lost) == (3, 0)
    assert stats.reconnects >= 1
    with connect(dsn(STANDBY, db.name)) as promoted:
        rows = promoted.execute(
            "SELECT task_id, status, fencing_token FROM distlock.task_execution_log ORDER BY task_id").fetchall()
    assert sorted(rows) == sorted((t, "completed", tokens[t]) for t in ids)
