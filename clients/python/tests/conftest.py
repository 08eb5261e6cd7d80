"""Clusters come from scripts/test_python.sh (ports in DISTLOCK_PY_*); every
test that needs isolation gets a database of its own."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from typing import Callable, Iterator

import psycopg
import pytest

PRIMARY = int(os.environ.get("DISTLOCK_PY_PRIMARY_PORT", "55436"))
STANDBY = int(os.environ.get("DISTLOCK_PY_STANDBY_PORT", "55437"))
POOLER = int(os.environ.get("DISTLOCK_PY_POOLER_PORT", "55438"))


def dsn(port: int = PRIMARY, dbname: str = "postgres", **extra: object) -> str:
    params = {"host": "127.0.0.1", "port": port, "user": "postgres", "dbname": dbname, **extra}
    return " ".join(f"{k}={v}" for k, v in params.items())


def connect(conninfo: str) -> psycopg.Connection:
    return psycopg.connect(conninfo, autocommit=True, prepare_threshold=None)


def lease_worker(dsn: str, task: int, lease: str) -> subprocess.Popen[str]:
    """A worker process that holds a lease-mode claim of `task` and then
    works with its connection idle (as a worker between calls does), until
    it is killed; returns once the claim is committed."""
    worker = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, psycopg\n"
         "c = psycopg.connect(sys.argv[1], autocommit=True)\n"
         "c.execute(\"SELECT distlock.try_acquire_task_lease(%s, 'doomed', %s::interval)\", (int(sys.argv[2]), sys.argv[3]))\n"
         "print('claimed', flush=True)\n"
         "sys.stdin.read()\n",
         dsn, str(task), lease],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert worker.stdout is not None and worker.stdout.readline().strip() == "claimed"
    return worker


def eventually(check: Callable[[], object], timeout: float = 10.0, what: str = "condition") -> object:
    """Polls `check` until it returns something truthy, or fails the test."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def on_standby(db: Db, sql: str) -> object:
    """The first value `sql` gives on the standby; None while the standby has
    not yet replayed the database and its extension."""
    try:
        with connect(dsn(STANDBY, db.name, connect_timeout=2)) as standby:
            if not standby.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pg_distlock'").fetchone() == (1,):
                return None
            row = standby.execute(sql).fetchone()
            return row[0] if row else None
    except psycopg.Error:
        return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The failover test ends the primary the other tests use.
    items.sort(key=lambda item: item.get_closest_marker("failover") is not None)


class Db:
    """A database with pg_distlock, and an autocommit admin connection to it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.dsn = dsn(PRIMARY, name)
        self.pooled_dsn = dsn(POOLER, name)
        self.admin = connect(self.dsn)

    def value(self, sql: str, *params: object) -> object:
        row = self.admin.execute(sql, params).fetchone()
        return row[0] if row else None

    def rows(self, sql: str, *params: object) -> list[tuple]:
        return self.admin.execute(sql, params).fetchall()

    def add_tasks(self, count: int, prefix: str = "task", **columns: object) -> list[int]:
        extra_cols = "".join(f", {c}" for c in columns)
        extra_vals = "".join(", %s" for _ in columns)
        return [
            r[0] for r in self.rows(
                f"INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at{extra_cols})"
                f" SELECT %s || '-' || i, 'test', '0 0 1 1 *', now(){extra_vals} FROM generate_series(1, %s) AS i"
                " RETURNING id",
                prefix, *columns.values(), count,
            )
        ]


@contextlib.contextmanager
def lock_wait_chain(db: Db, lock: str, waiters: int = 2) -> Iterator[int]:
    """A session named holder holding distlock.lock(lock) and `waiters`
    sessions (waiter0, ...) waiting up to 30 s for it; the holder's pid.
    Their waits must end without error once the holder lets go."""
    holder = connect(db.dsn + " application_name=holder")
    holder.execute("SELECT distlock.lock(%s)", (lock,))
    errors: list[BaseException] = []

    def wait(app: str) -> None:
        try:
            with connect(db.dsn + f" application_name={app}") as waiter:
                waiter.execute("SELECT distlock.lock(%s, '30 seconds')", (lock,))
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=wait, args=(f"waiter{i}",)) for i in range(waiters)]
    for thread in threads:
        thread.start()
    try:
        yield holder.info.backend_pid
    finally:
        holder.close()
        for thread in threads:
            thread.join(timeout=30)
    assert not errors


def new_database(port: int = PRIMARY, version: str | None = None) -> Db:
    """With `version`, pg_distlock's SQL of that older release, which this
    library serves until ALTER EXTENSION pg_distlock UPDATE."""
    name = f"pydl_{uuid.uuid4().hex[:12]}"
    with connect(dsn(port)) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    db = Db(name)
    db.admin.execute("CREATE EXTENSION pg_distlock" + (f" VERSION '{version}'" if version else ""))
    return db


def drop_database(db: Db) -> None:
    db.admin.close()
    try:
        with connect(dsn(connect_timeout=2)) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {db.name} WITH (FORCE)")
    except psycopg.OperationalError:
        pass  # the failover test ended the primary


@pytest.fixture
def db() -> Iterator[Db]:
    database = new_database()
    yield database
    drop_database(database)


@pytest.fixture
def name() -> str:
    return f"n-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def monitor_role(db: Db) -> Iterator[str]:
    role = f"mon_{uuid.uuid4().hex[:8]}"
    db.admin.execute(f"CREATE ROLE {role} LOGIN")
    db.admin.execute("SELECT distlock.grant_capability(%s, 'monitor')", (role,))
    yield role
    db.admin.execute(f"DROP OWNED BY {role}")
    db.admin.execute(f"DROP ROLE {role}")
