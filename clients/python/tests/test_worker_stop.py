"""Workers stop promptly: stop() (what SIGTERM calls) cancels an idle
QueueWorker's wait in the server; a statement_timeout shorter than the wait
is an idle round, not an error."""

from __future__ import annotations

import threading
import time

import pg_distlock
from conftest import Db, eventually


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
