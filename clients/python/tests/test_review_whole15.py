"""Fifteenth whole review (ea92dab): the TaskWorker's sleep until the next
due task (distlock.next_task_wait). Each test fails until fixed."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

import pg_distlock
from conftest import Db

MODES = ["session", "lease"]


@pytest.mark.parametrize("mode", MODES)
def test_review_whole15_a_task_due_during_an_empty_plain_fetch_waits_the_whole_poll_interval(db: Db, mode: str) -> None:
    """review_missed3 fixed this for the fused release_and_fetch_task: after
    it found nothing, `_fetch` looks again before asking next_task_wait. The
    plain fetch has the same race and nothing looks again: it judges "due"
    by its statement's start (sql/queries/due_tasks.sql: `now()`), and
    next_task_wait, asked right after (clients/python/src/pg_distlock/_core/
    tasks.py `_idle_pause`), by the clock. A task that came due while the
    fetch ran (here the fetch waited 2.5 s on the row of another task an
    admin was disabling; a slow missed-run skip or a busy server does the
    same) is "due now", 0, and `_idle_pause` turns 0 into the *whole*
    poll_interval ("a task due now that it could not take", though the
    fetch never saw it due). The task runs 20 s late. Fix: on 0, fetch once
    more before sleeping (or have next_task_wait measure from the fetch's
    statement start)."""
    other = db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)"
                     " VALUES ('other', 'test', '0 0 1 1 *', now() - interval '1 minute') RETURNING id")
    due = db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)"
                   " VALUES ('due', 'test', '0 0 1 1 *', now() + interval '1 hour') RETURNING id")
    admin = psycopg.connect(db.dsn, autocommit=True)
    committed = threading.Event()
    # An admin disables `other` in a transaction that lasts 2.5 s: the
    # worker's fetch, finding `other` due, waits on its row, then passes it over.
    admin.execute("BEGIN")
    admin.execute("UPDATE distlock.scheduled_tasks SET is_enabled = false WHERE id = %s", (other,))
    # `due` comes due 1 s from now, while the fetch waits.
    db.value("UPDATE distlock.scheduled_tasks SET next_run_at = clock_timestamp() + interval '1 second'"
             " WHERE id = %s RETURNING id", due)

    def later() -> None:
        time.sleep(2.5)
        admin.execute("COMMIT")
        committed.set()
    threading.Thread(target=later, daemon=True).start()

    worker = pg_distlock.TaskWorker(db.dsn, lambda claim: None, worker_id="w1", mode=mode, poll_interval=20.0,
                                    max_tasks=1)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert committed.wait(15), "the admin committed"
        deadline = time.monotonic() + 8
        ran = None
        while time.monotonic() < deadline and ran is None:
            ran = db.value("SELECT 1 FROM distlock.task_execution_log WHERE task_id = %s LIMIT 1", due)
            time.sleep(0.1)
        assert ran is not None, (
            "the task due since the fetch waited is not claimed within 8 s:"
            " the worker sleeps its whole 20 s poll interval")
    finally:
        worker.stop()
        thread.join(timeout=30)
        admin.close()


@pytest.mark.parametrize("grace", [float("nan"), float("inf"), 1e18, "10 minutes"])
def test_review_whole15_define_task_raises_a_bare_python_error_for_a_bad_grace(db: Db, grace: object) -> None:
    """Admin.define_task checks each argument and raises InvalidArgument
    (its docstring: "InvalidArgument for a value the server refuses"), but
    passes `missed_runs_grace` unchecked to keeper.interval
    (clients/python/src/pg_distlock/_core/admin.py `_define_task_op`), which
    is `timedelta(seconds=value)`: NaN raises ValueError, infinity and 1e18
    OverflowError, a string TypeError, none of them the library's errors,
    unlike every other duration the library takes (keeper.non_negative).
    Fix: `non_negative(missed_runs_grace, "missed_runs_grace")` first."""
    admin = pg_distlock.Admin(db.dsn)
    try:
        with pytest.raises(pg_distlock.InvalidArgument):
            admin.define_task("report", "report", "@hourly", missed_runs="skip",
                              missed_runs_grace=grace)  # type: ignore[arg-type]
    finally:
        admin.close()


def test_review_whole15_a_task_parked_at_infinity_stops_every_idle_worker(db: Db) -> None:
    """next_task_wait computes `next_run_at - clock_timestamp()` for the
    earliest unclaimed task in scope (sql/queries/next_task_wait.sql), and
    PostgreSQL raises "cannot subtract infinite timestamps" (22008) when
    that is `infinity`: a task an admin parked with next_run_at =
    'infinity' (as review_missed's tests and docs treat `-infinity`, a
    value the column takes) while no other task is scheduled. Every idle
    TaskWorker in scope then gets the error from `_idle_pause` (clients/
    python/src/pg_distlock/_core/tasks.py; only PermissionDenied is caught)
    after each empty fetch, and a task defined later is not run. Fix: in
    SQL, leave out infinite next_run_at (or answer NULL for it); in the
    worker, poll on any error of next_task_wait."""
    db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)"
             " VALUES ('parked', 'test', '0 0 * * *', 'infinity') RETURNING id")
    worker = pg_distlock.TaskWorker(db.dsn, lambda claim: None, worker_id="w1", poll_interval=0.5, max_tasks=1)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:  # noqa: BLE001 - what the worker raised
            failure.append(exc)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        time.sleep(1.5)
        later = db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)"
                         " VALUES ('later', 'test', '0 0 * * *', now()) RETURNING id")
        deadline = time.monotonic() + 8
        ran = None
        while time.monotonic() < deadline and ran is None:
            ran = db.value("SELECT 1 FROM distlock.task_execution_log WHERE task_id = %s LIMIT 1", later)
            time.sleep(0.1)
        assert ran is not None and not failure, f"the task defined later runs; the worker raised {failure!r}"
    finally:
        worker.stop()
        thread.join(timeout=30)
