"""Review 33 of the Python client (the changes 256134c..742088c): each test
is a break the review found, and fails without its fix."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import signal
import socket
import struct
import threading
from typing import Callable, Iterator

import pytest

import pg_distlock
from pg_distlock import aio
from pg_distlock.cli import main
from conftest import Db, PRIMARY, connect, dsn, eventually
from test_review_47 import FakeServer, run_in_thread


def leader_backends(db: Db, node: str, where: str) -> int:
    """How many backends of `node`'s campaign (its default application_name) match `where`."""
    return int(db.value(f"SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND {where}",
                        f"pg_distlock:leader:{node}") or 0)


def group_held_by(db: Db, group: str, node: str) -> bool:
    return bool(db.value("SELECT count(*) FROM distlock.leader_state WHERE group_name = %s AND leader = %s",
                         group, node))


@contextlib.contextmanager
def leader_state_locked(db: Db) -> Iterator[None]:
    """leader_state locked until the block ends, as a DDL or an extension
    update locks it: a campaign meanwhile waits in the server."""
    blocker = connect(db.dsn)
    try:
        blocker.execute("BEGIN")
        blocker.execute("LOCK TABLE distlock.leader_state IN ACCESS EXCLUSIVE MODE")
        yield
    finally:
        blocker.close()  # and with it the lock


# -- F2. A campaign that fails for a reason that can pass is tried again


def b_takes_over_after(db: Db, group: str, meanwhile: Callable[[], None], b_conninfo: str | None = None) -> None:
    """a leads `group`; b, started behind it, lost its first campaign. After
    `meanwhile()`, a resigns: b must lead within 10 s."""
    a = pg_distlock.Leader(db.dsn, group, node="a", ttl=3)
    b = pg_distlock.Leader(b_conninfo or db.dsn, group, node="b", ttl=3)
    try:
        a.start()
        assert a.wait_elected(timeout=10)
        b.start()
        assert b.leader == "a"
        meanwhile()
        a.stop()
        assert b.wait_elected(timeout=10)
    finally:
        for node in (a, b):
            try:
                node.close()
            except pg_distlock.DistlockError:
                pass


def test_a_standby_node_keeps_campaigning_after_a_campaign_hits_its_statement_timeout(
        db: Db, caplog: pytest.LogCaptureFixture) -> None:
    """b's campaign waits behind a lock of leader_state (a DDL, an extension
    update) until its statement_timeout ends it: 57014, Cancelled. b used to
    stop campaigning for good, so it never took over from a."""
    def campaign_ends_by_its_statement_timeout() -> None:
        with caplog.at_level(logging.WARNING, logger="pg_distlock.leader"), leader_state_locked(db):
            eventually(lambda: any("statement timeout" in r.getMessage() for r in caplog.records),
                       what="b's campaign ended by its statement_timeout")

    b_takes_over_after(db, "rev33-timeout", campaign_ends_by_its_statement_timeout,
                       b_conninfo=dsn(PRIMARY, db.name, options="'-c statement_timeout=300'"))


OLD_LIBRARY_REFUSALS = [
    ("42883", 'could not find function "distlock_library_guard" in file "/usr/lib/postgresql/15/lib/pg_distlock.so"'),
    ("55000", "this session runs pg_distlock's library 0.4.0, but this database's pg_distlock is 0.5.0"),
]


def refuse_writes_of_old_library_sessions(db: Db, table: str, refusal: tuple[str, str]) -> Callable[[str], None]:
    """Makes `table` refuse the writes of chosen sessions as the library
    guard refuses a session that loaded the library before ALTER EXTENSION
    UPDATE (src/library_guard.rs); returns what chooses them: the sessions
    named `application_name` now (a new session is not refused)."""
    sqlstate, message = refusal
    db.admin.execute("CREATE TABLE IF NOT EXISTS public.old_library_backends (pid integer PRIMARY KEY)")
    db.admin.execute(f"""
        CREATE OR REPLACE FUNCTION public.refuse_old_library() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF EXISTS (SELECT FROM public.old_library_backends WHERE pid = pg_backend_pid()) THEN
            RAISE EXCEPTION USING ERRCODE = '{sqlstate}', MESSAGE = $m${message}$m$;
          END IF;
          RETURN NULL;
        END $$""")
    db.admin.execute(f"CREATE TRIGGER refuse_old_library BEFORE INSERT OR UPDATE OR DELETE ON {table}"
                     " FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_old_library()")

    def choose(application_name: str) -> None:
        assert db.value("WITH old AS (INSERT INTO public.old_library_backends SELECT pid FROM pg_stat_activity"
                        " WHERE application_name = %s RETURNING pid) SELECT count(*) FROM old",
                        application_name) == 1

    return choose


@pytest.mark.parametrize("refusal", OLD_LIBRARY_REFUSALS, ids=["library-before-0.4.0", "older-library"])
def test_a_standby_node_whose_session_kept_the_old_library_reconnects_and_takes_over(
        db: Db, refusal: tuple[str, str]) -> None:
    """During an extension update, b campaigns on a session that may not
    write. It used to stop for good (NotInstalled, LeaseLost); retrying
    alone would keep the refused session."""
    refused = refuse_writes_of_old_library_sessions(db, "distlock.leader_state", refusal)
    b_takes_over_after(db, "rev33-upgrade", lambda: refused("pg_distlock:leader:b"))


async def test_an_asyncio_call_refused_for_the_old_library_is_unavailable_and_the_next_reconnects(db: Db) -> None:
    refused = refuse_writes_of_old_library_sessions(db, "distlock.queue_settings", OLD_LIBRARY_REFUSALS[1])
    async with aio.Admin(f"{db.dsn} application_name=rev33-admin") as admin:
        assert await admin.pause_queue("mail")
        refused("rev33-admin")
        with pytest.raises(pg_distlock.Unavailable) as raised:
            await admin.resume_queue("mail")
        assert "reconnect" in str(raised.value)
        assert await admin.resume_queue("mail")


# -- F3. A start() that does not return leaves nothing campaigning


def interrupt_main_thread_when(condition: Callable[[], object]) -> threading.Thread:
    """SIGINT to the main thread (Ctrl-C: KeyboardInterrupt there) once `condition` holds."""
    def watch() -> None:
        eventually(condition, what="the moment to interrupt")
        signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    return watcher


def zombie_campaign_waits(db: Db) -> bool:
    return leader_backends(db, "zombie", "wait_event_type = 'Lock'") > 0


def assert_nothing_campaigned(db: Db, group: str, elected: list[int]) -> None:
    """Once a campaign statement that waited has ended, zombie neither holds
    `group` nor heard it was elected."""
    eventually(lambda: not leader_backends(db, "zombie", "state = 'active'"), what="the campaign's end")
    assert not group_held_by(db, group, "zombie")
    assert elected == []


def test_a_leader_start_interrupted_by_ctrl_c_leaves_nothing_campaigning(db: Db) -> None:
    """Ctrl-C while start() waits for the first campaign's answer: start()
    closed its connection but left the campaign running, which won once
    the lock it waited for was free, for an object its caller thinks never
    started (nothing would ever stop it)."""
    group = "rev33-interrupted"
    elected: list[int] = []
    zombie = pg_distlock.Leader(db.dsn, group, node="zombie", ttl=3, on_elected=elected.append)
    with leader_state_locked(db):
        watcher = interrupt_main_thread_when(lambda: zombie_campaign_waits(db))
        with pytest.raises(KeyboardInterrupt):
            zombie.start()
        watcher.join(10)
    assert_nothing_campaigned(db, group, elected)


async def test_a_cancelled_asyncio_leader_start_leaves_nothing_campaigning(db: Db) -> None:
    """asyncio.wait_for(leader.start(), 2) (a startup guard, a framework's
    lifespan timeout) cancelling start() while it waits for the first
    campaign's answer: as with Ctrl-C in the blocking API."""
    group = "rev33-cancelled"
    elected: list[int] = []
    zombie = aio.Leader(db.dsn, group, node="zombie", ttl=3, on_elected=elected.append)
    with leader_state_locked(db):
        start = asyncio.ensure_future(zombie.start())
        await asyncio.to_thread(eventually, lambda: zombie_campaign_waits(db), 10.0, "the first campaign waiting")
        start.cancel()
        with pytest.raises(asyncio.CancelledError):
            await start
    await asyncio.to_thread(assert_nothing_campaigned, db, group, elected)


# -- F4. Credentials and transport settings that cannot work are Misconfigured


class PasswordAskingServer(FakeServer):
    """Asks each connection for a cleartext password, as a server whose
    pg_hba.conf line says password, md5 or scram-sha-256 asks for one."""

    def __init__(self) -> None:
        super().__init__(PRIMARY, None)

    def _serve(self, client: socket.socket) -> None:
        try:
            self._read_startup(client)
            client.sendall(b"R" + struct.pack("!ii", 8, 3))  # AuthenticationCleartextPassword
            client.recv(1)  # until the client gives up
        except OSError:
            pass
        finally:
            client.close()


def run_raises_misconfigured(conninfo: str) -> pg_distlock.Misconfigured:
    """A QueueWorker's run() on `conninfo` raises Misconfigured within 5 s,
    rather than retrying forever."""
    worker = pg_distlock.QueueWorker(conninfo, lambda job: None, wait=0.2, handle_signals=False)
    thread, outcome = run_in_thread(worker)
    try:
        eventually(lambda: outcome, timeout=5, what="run() to raise")
    finally:
        worker.stop()
        thread.join(30)
    assert isinstance(outcome[0], pg_distlock.Misconfigured), outcome[0]
    return outcome[0]


def test_a_conninfo_without_the_password_the_server_asks_for_is_misconfigured(monkeypatch: pytest.MonkeyPatch) -> None:
    """libpq says 'fe_sendauth: no password supplied' (no password in the
    conninfo, PGPASSWORD or the passfile): it used to be retried forever."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    server = PasswordAskingServer()
    try:
        conninfo = dsn(server.port, "x", passfile="/nonexistent")
        with pytest.raises(pg_distlock.Misconfigured) as raised:
            pg_distlock.Client(conninfo)
        assert "no password supplied" in str(raised.value)
        run_raises_misconfigured(conninfo)
    finally:
        server.close()


def test_a_role_without_connect_privilege_is_misconfigured(db: Db) -> None:
    role = "rev33_noconnect"
    db.admin.execute(f"DROP ROLE IF EXISTS {role}")
    db.admin.execute(f"CREATE ROLE {role} LOGIN")
    db.admin.execute(f"REVOKE CONNECT ON DATABASE {db.name} FROM PUBLIC")
    try:
        conninfo = dsn(PRIMARY, db.name, user=role)
        with pytest.raises(pg_distlock.Misconfigured) as raised:
            pg_distlock.Client(conninfo)
        assert "permission denied for database" in str(raised.value)
        run_raises_misconfigured(conninfo)
    finally:
        db.admin.execute(f"GRANT CONNECT ON DATABASE {db.name} TO PUBLIC")
        db.admin.execute(f"DROP ROLE {role}")


def test_a_conninfo_requiring_ssl_of_a_server_without_it_is_misconfigured(db: Db) -> None:
    """The test cluster has ssl = off."""
    conninfo = dsn(PRIMARY, db.name, sslmode="require")
    with pytest.raises(pg_distlock.Misconfigured) as raised:
        pg_distlock.Client(conninfo)
    assert "SSL was required" in str(raised.value)
    run_raises_misconfigured(conninfo)


# -- F5. Client() leaves a server that says "not now" to its pool


def test_a_worker_made_from_a_client_while_the_server_starts_up_waits_for_it(
        db: Db, caplog: pytest.LogCaptureFixture) -> None:
    """client = Client(DSN); client.queue_worker(h).run() during a restart:
    Client() raised Unavailable, so the worker the README says rides out a
    restart never ran."""
    server = FakeServer(PRIMARY, ("57P03", "the database system is starting up"))
    try:
        with caplog.at_level(logging.WARNING, logger="pg_distlock"):
            client = pg_distlock.Client(dsn(server.port, db.name))
        assert any("starting up" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
        server.refusal = None  # the server is up
        done: list[int] = []
        worker = client.queue_worker(lambda job: done.append(job.id), wait=0.2, handle_signals=False)
        thread, outcome = run_in_thread(worker)
        try:
            job = pg_distlock.Queue(db.dsn).enqueue("after-restart", {})
            eventually(lambda: done == [job] or outcome, timeout=20, what="the job or the worker's end")
            assert not outcome, f"run() ended: {outcome[0]!r}"
        finally:
            worker.stop()
            thread.join(30)
            client.close()
    finally:
        server.close()


async def test_an_asyncio_client_opened_while_the_server_starts_up_serves_once_it_is_up(db: Db) -> None:
    server = FakeServer(PRIMARY, ("57P03", "the database system is starting up"))
    try:
        async with aio.Client(dsn(server.port, db.name)) as client:
            server.refusal = None  # the server is up
            assert (await client.features()).settle_and_consume
    finally:
        server.close()


# -- F6. An admin call's argument out of its parameter's range


def test_admin_numbers_beyond_a_32_bit_integer_are_invalid_arguments(db: Db) -> None:
    """psycopg sends a Python int beyond int4 as bigint, and the server knew
    no run_task_now(bigint): 42883, which read as 'pg_distlock is not
    installed, run CREATE EXTENSION'."""
    with pg_distlock.Client(db.dsn) as client:
        admin = client.admin()
        for call in (lambda: admin.run_task_now(2**31), lambda: admin.set_queue_limit("q", 2**31)):
            with pytest.raises(pg_distlock.InvalidArgument):
                call()


def test_the_cli_says_a_task_id_beyond_a_32_bit_integer_is_out_of_range(
        db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    """`pg-distlock run-now 3000000000` said 'function
    distlock.run_task_now(bigint) does not exist'."""
    main(["--dsn", db.dsn, "run-now", str(2**31), "--yes"], stdin=io.StringIO(), stdout=io.StringIO())
    error = capsys.readouterr().err
    assert "out of range" in error and "does not exist" not in error, error
