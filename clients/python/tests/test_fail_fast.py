"""Configuration errors raise at once, naming the cause and what to check;
only what can pass is retried (issue 47, item 1). Before, a wrong port or
role made workers retry forever, logging at INFO, and a Client's first call
waited 30 s for its pool and dropped the cause."""

from __future__ import annotations

import io
import logging
import threading
import time
from typing import Any, Callable

import psycopg
import pytest

import pg_distlock
from pg_distlock import aio
from pg_distlock.cli import main
from conftest import Db, PRIMARY, connect, dsn, eventually, free_port


def raises_within(seconds: float, error: type[BaseException], call: Callable[[], Any]) -> BaseException:
    started = time.monotonic()
    with pytest.raises(error) as raised:
        call()
    assert time.monotonic() - started < seconds, f"{error.__name__} took {time.monotonic() - started:.1f} s"
    return raised.value


def wrong_conninfos(db: Db) -> list[tuple[str, str]]:
    """Conninfos that cannot work, each with words its error must hold."""
    return [
        (dsn(free_port(), db.name), "check the conninfo's host and port"),
        (dsn(PRIMARY, db.name, user="no_such_role_47"), 'role "no_such_role_47" does not exist'),
        (dsn(PRIMARY, "no_such_database_47"), 'database "no_such_database_47" does not exist'),
    ]


def test_workers_raise_a_wrong_conninfo_at_once(db: Db) -> None:
    for conninfo, words in wrong_conninfos(db):
        for make in (lambda c: pg_distlock.QueueWorker(c, lambda job: None, wait=0.2, handle_signals=False),
                     lambda c: pg_distlock.TaskWorker(c, lambda claim: None, poll_interval=0.2, handle_signals=False)):
            error = raises_within(5, pg_distlock.Misconfigured, make(conninfo).run)
            assert words in str(error), error
            assert isinstance(error.__cause__, psycopg.Error)


def test_the_password_is_not_shown() -> None:
    conninfo = dsn(free_port(), "x", password="s3cret-47")
    error = raises_within(5, pg_distlock.Misconfigured, lambda: pg_distlock.Client(conninfo))
    assert "s3cret-47" not in str(error) and "dbname=x" in str(error), error


def test_a_client_checks_its_conninfo_and_the_extension_when_made(db: Db) -> None:
    for conninfo, words in wrong_conninfos(db):
        error = raises_within(5, pg_distlock.Misconfigured, lambda: pg_distlock.Client(conninfo))
        assert words in str(error), error
    db.admin.execute("DROP EXTENSION pg_distlock")
    error = raises_within(5, pg_distlock.NotInstalled, lambda: pg_distlock.Client(db.dsn))
    assert "CREATE EXTENSION pg_distlock" in str(error)


async def test_an_asyncio_client_checks_its_conninfo_when_opened(db: Db) -> None:
    conninfo, words = wrong_conninfos(db)[1]
    started = time.monotonic()
    with pytest.raises(pg_distlock.Misconfigured) as raised:
        async with aio.Client(conninfo):
            pass
    assert time.monotonic() - started < 5 and words in str(raised.value)


def test_a_leader_that_cannot_campaign_raises_from_start(db: Db, monitor_role: str) -> None:
    """A role without the worker capability: start() used to return,
    wait_elected(3) to answer False, and the error to show only at close()."""
    leader = pg_distlock.Leader(f"{db.dsn} user={monitor_role}", "reports", ttl=3)
    error = raises_within(5, pg_distlock.PermissionDenied, leader.start)
    assert "try_become_leader" in str(error) or "permission denied" in str(error).lower(), error
    with pytest.raises(pg_distlock.PermissionDenied):
        leader.wait_elected(timeout=3)
    with pytest.raises(pg_distlock.PermissionDenied):
        leader.close()


def test_a_leader_with_a_wrong_conninfo_raises_from_start(db: Db) -> None:
    conninfo, words = wrong_conninfos(db)[0]
    error = raises_within(5, pg_distlock.Misconfigured, pg_distlock.Leader(conninfo, "reports", ttl=3).start)
    assert words in str(error)


def test_the_console_does_not_start_on_a_wrong_conninfo(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    """(The exporter does: it reports the database as pg_distlock_up 0,
    test_metrics.py.)"""
    for conninfo, words in wrong_conninfos(db):
        started = time.monotonic()
        assert main(["--dsn", conninfo, "console", "--port", str(free_port())], stdin=io.StringIO(),
                    stdout=io.StringIO()) == 3
        assert time.monotonic() - started < 5
        assert words in capsys.readouterr().err


def test_a_call_refused_before_any_connection_is_misconfigured_and_still_unavailable() -> None:
    """Code written to fall back on Unavailable (a throttle that lets
    requests through while the database is down) keeps doing so."""
    error = raises_within(5, pg_distlock.Misconfigured, lambda: pg_distlock.features(dsn(free_port(), "postgres")))
    assert isinstance(error, pg_distlock.Unavailable)


def _allow_connections(db: Db, allowed: bool) -> None:
    """Whether new connections to the database are accepted (refused, it is
    not for good: the database is there); when not, the workers'
    connections are ended."""
    with connect(dsn()) as admin:
        admin.execute(f"ALTER DATABASE {db.name} ALLOW_CONNECTIONS {str(allowed).lower()}")
    if not allowed:
        db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                         " WHERE datname = current_database() AND pid <> pg_backend_pid()")


def test_after_a_first_success_a_refused_reconnect_is_retried_with_a_warning(
        db: Db, caplog: pytest.LogCaptureFixture) -> None:
    done: list[int] = []
    worker = pg_distlock.QueueWorker(db.dsn, lambda job: done.append(job.id), wait=0.2, handle_signals=False)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        queue = pg_distlock.Queue(db.dsn)
        first = queue.enqueue("one", {})
        eventually(lambda: done == [first], what="the first job")
        with caplog.at_level(logging.WARNING, logger="pg_distlock.worker"):
            _allow_connections(db, False)
            eventually(lambda: any("cannot connect" in r.getMessage() and "retrying" in r.getMessage()
                                   and r.levelno == logging.WARNING for r in caplog.records),
                       what="a warning that names the cause")
        _allow_connections(db, True)
        second = pg_distlock.Queue(db.dsn).enqueue("two", {})
        eventually(lambda: done == [first, second], timeout=20, what="the worker back at work")
    finally:
        _allow_connections(db, True)
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()


def test_a_worker_meant_to_end_when_idle_stops_retrying_and_raises(db: Db) -> None:
    pg_distlock.Queue(db.dsn).enqueue("one", {})
    started = threading.Event()
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            worker.run()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    # Cut off while the handler runs, so that the next fetch reconnects.
    release = threading.Event()
    worker = pg_distlock.QueueWorker(db.dsn, lambda job: (started.set(), release.wait(10)), wait=0.2,
                                     exit_when_idle=True, handle_signals=False)
    worker._loop.reconnect_when_idle_for = 1.0
    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert started.wait(10)
        _allow_connections(db, False)
        release.set()
        thread.join(20)
    finally:
        _allow_connections(db, True)
    assert not thread.is_alive()
    assert outcome and isinstance(outcome[0], pg_distlock.Unavailable), outcome
    assert "not currently accepting connections" in str(outcome[0])


def test_a_lock_call_of_a_client_whose_database_went_away_ends_within_its_timeout(db: Db) -> None:
    """lock(timeout=1) behind a pool with no connection to give: it used to
    wait the pool's 30 s and raise 'couldn't get a connection' without the
    cause."""
    with pg_distlock.Client(db.dsn, min_size=1, max_size=2) as client:
        with client.lock("warm-up", timeout=1):
            pass
        _allow_connections(db, False)
        try:
            outcomes: list[tuple[float, BaseException]] = []
            # The first calls may get the pool's connections, dead since
            # (each raises at once); then the pool has none to give.
            while len(outcomes) < 4 and not (outcomes and "accepting" in str(outcomes[-1][1])):
                started = time.monotonic()
                with pytest.raises(pg_distlock.Unavailable) as raised:
                    with client.lock("after", timeout=1):
                        pass
                outcomes.append((time.monotonic() - started, raised.value))
        finally:
            _allow_connections(db, True)
    took, error = outcomes[-1]
    assert took < 4, f"{took:.1f} s"
    assert "not currently accepting connections" in str(error), error
    assert isinstance(error.__cause__, psycopg.Error), error.__cause__
