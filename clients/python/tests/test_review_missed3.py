"""Third review of the missed-run work (790181d): the TaskWorker's sleep until
the next due task (distlock.next_task_wait). Each test fails until fixed."""
from __future__ import annotations

import threading
import time

import psycopg
import pytest

import pg_distlock
from conftest import PRIMARY, Db, dsn

MODES = ["session", "lease"]


@pytest.mark.parametrize("mode", MODES)
def test_review_missed3_after_an_empty_fused_fetch_a_due_task_waits_the_whole_poll_interval(db: Db, mode: str) -> None:
    """A run's release also claims the next due task (release_and_fetch_task);
    when that finds nothing, `_fetch` (clients/python/src/pg_distlock/_core/
    tasks.py, the `ahead == []` path) does not try a claim and asks
    next_task_wait at once. The fused fetch judged "due" by its statement's
    start (sql/queries/due_tasks.sql: `now()`), next_task_wait by the clock:
    a task that came due while the release ran (here it waited 2.5 s for the
    task row, as behind any admin's or sweep's update; a busy server or a
    slow missed-run plan does the same) is "due now", 0, and `_idle_pause`
    turns 0 into the *whole* poll_interval, "a task due now that it could
    not take", though it never tried. The due task runs 20 s late."""
    first = db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)"
                     " VALUES ('first', 'test', '0 0 1 1 *', now()) RETURNING id")
    second = db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)"
                      " VALUES ('second', 'test', '0 0 1 1 *', now() + interval '1 hour') RETURNING id")
    holder = psycopg.connect(db.dsn, autocommit=True)
    release_holder = threading.Event()

    def handler(claim: pg_distlock.TaskClaim) -> None:
        if claim.task_id != first:
            return
        # Someone holds the task row for 2.5 s (an admin's UPDATE, say) ...
        holder.execute("BEGIN")
        holder.execute("SELECT 1 FROM distlock.scheduled_tasks WHERE id = %s FOR UPDATE", (first,))
        # ... and the second task comes due 1 s from now, while the release waits.
        db.value("UPDATE distlock.scheduled_tasks SET next_run_at = clock_timestamp() + interval '1 second'"
                 " WHERE id = %s RETURNING id", second)

        def later() -> None:
            time.sleep(2.5)
            holder.execute("COMMIT")
            release_holder.set()
        threading.Thread(target=later, daemon=True).start()

    worker = pg_distlock.TaskWorker(db.dsn, handler, worker_id="w1", mode=mode, poll_interval=20.0, max_tasks=2)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    try:
        assert release_holder.wait(15), "the first task ran"
        deadline = time.monotonic() + 8
        late = None
        while time.monotonic() < deadline and late is None:
            late = db.value("SELECT extract(epoch FROM clock_timestamp() - t.next_run_at)::float8"
                            " FROM distlock.task_execution_log l JOIN distlock.scheduled_tasks t ON t.id = l.task_id"
                            " WHERE l.task_id = %s LIMIT 1", second)
            time.sleep(0.1)
        assert late is not None, (
            "the second task, due since the release of the first, is not claimed within 8 s:"
            " the worker sleeps its whole 20 s poll interval")
    finally:
        worker.stop()
        thread.join(timeout=30)
        holder.close()


def test_review_missed3_a_worker_without_execute_on_next_task_wait_dies_when_idle(db: Db) -> None:
    """docs/privileges.md: a database made with 0.3.0 keeps the grants made
    by hand, and the update to 0.4.0 re-grants only capabilities. A worker
    role granted 0.3.0's worker functions by hand works on 0.4.0 as before,
    until its first fetch that finds nothing: `_idle_pause` (clients/python/
    src/pg_distlock/_core/tasks.py) calls distlock.next_task_wait() because
    `Features.next_task_wait` (features.py) only asks whether the function
    exists, not whether the caller may execute it; PermissionDenied ends
    `TaskWorker.run()`, and every idle worker of the fleet dies after the
    server update. Fix: detect with has_function_privilege, or fall back to
    poll_interval on PermissionDenied (42501)."""
    role = f"review_missed3_hand_{db.name[-8:]}"
    db.admin.execute(f"DROP ROLE IF EXISTS {role}")
    db.admin.execute(f"CREATE ROLE {role} LOGIN")
    try:
        # What a 0.3.0-era script granted by hand: the worker functions, not the new one.
        for (privilege, obj) in db.rows(
                "SELECT privilege, object FROM distlock.capability_privileges('worker')"
                " WHERE object <> 'FUNCTION distlock.next_task_wait()'"):
            db.admin.execute(f"GRANT {privilege} ON {obj} TO {role}")
        worker = pg_distlock.TaskWorker(dsn(PRIMARY, db.name, user=role), lambda claim: None, worker_id="hand",
                                        exit_when_idle=True)
        try:
            stats = worker.run()
        except pg_distlock.errors.PermissionDenied as exc:
            pytest.fail(f"an idle worker that could fetch dies: {exc}")
        assert stats.claimed == 0
    finally:
        db.admin.execute(f"DROP OWNED BY {role}")
        db.admin.execute(f"DROP ROLE {role}")
