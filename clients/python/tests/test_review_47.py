"""Review of issue 47's client changes (74dfda3..0048132): each test is a
break found by attacking them, failing on 0048132."""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any, Callable

import psycopg
import pytest

import pg_distlock
from conftest import Db, PRIMARY, STANDBY, connect, dsn, eventually


class FakeServer:
    """A loopback TCP endpoint in front of a real server: while `refusal`
    is set it answers each connection as a PostgreSQL server does that
    refuses it (an ErrorResponse with `refusal`'s SQLSTATE and text, as
    during a restart, a failover or a full server); otherwise it forwards
    the bytes to `target` (a port on 127.0.0.1)."""

    def __init__(self, target: int, refusal: tuple[str, str] | None) -> None:
        self.target = target
        self.refusal = refusal
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = int(self.listener.getsockname()[1])
        self.refused = 0
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self.closed = True
        self.listener.close()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    @staticmethod
    def _read(sock: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise OSError("closed")
            data += chunk
        return data

    @classmethod
    def _read_startup(cls, client: socket.socket) -> None:
        """Reads a connection's first packets as a server without SSL or GSSAPI
        encryption does: an SSLRequest or GSSENCRequest is answered 'N', then
        comes the startup packet."""
        while True:
            length, code = struct.unpack("!ii", cls._read(client, 8))
            cls._read(client, length - 8)
            if code not in (80877103, 80877104):
                return
            client.sendall(b"N")

    def _serve(self, client: socket.socket) -> None:
        refusal = self.refusal
        try:
            if refusal is None:
                self._forward(client)
                return
            self._read_startup(client)
            sqlstate, message = refusal
            fields = b"".join(k + v.encode() + b"\0" for k, v in
                              ((b"S", "FATAL"), (b"V", "FATAL"), (b"C", sqlstate), (b"M", message))) + b"\0"
            client.sendall(b"E" + struct.pack("!i", len(fields) + 4) + fields)
            self.refused += 1
        except OSError:
            pass
        finally:
            if refusal is not None:
                client.close()

    def _forward(self, client: socket.socket) -> None:
        server = socket.create_connection(("127.0.0.1", self.target))

        def pipe(a: socket.socket, b: socket.socket) -> None:
            try:
                while True:
                    data = a.recv(65536)
                    if not data:
                        break
                    b.sendall(data)
            except OSError:
                pass
            finally:
                for s in (a, b):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        threading.Thread(target=pipe, args=(client, server), daemon=True).start()
        threading.Thread(target=pipe, args=(server, client), daemon=True).start()


def run_in_thread(worker: Any) -> tuple[threading.Thread, list[BaseException | None]]:
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            worker.run()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


# -- 1. A server that is reached and says "not now" is not a wrong conninfo


@pytest.mark.parametrize("refusal", [
    ("57P03", "the database system is starting up"),
    ("53300", "sorry, too many clients already"),
], ids=["starting-up", "too-many-clients"])
def test_a_worker_started_while_its_server_restarts_waits_for_it(db: Db, refusal: tuple[str, str]) -> None:
    """A fleet restarted together with its database (or started while the
    server is full): the server answers, with an SQLSTATE the error table
    calls Unavailable (57P03, 53300). The worker used to retry until the
    server was up; now run() raises Misconfigured at once, telling to
    'check the conninfo's host and port'."""
    server = FakeServer(PRIMARY, refusal)
    done: list[int] = []
    worker = pg_distlock.QueueWorker(dsn(server.port, db.name), lambda job: done.append(job.id), wait=0.2,
                                     handle_signals=False)
    thread, outcome = run_in_thread(worker)
    try:
        eventually(lambda: server.refused >= 1, what="the worker's first connect")
        time.sleep(1.0)
        server.refusal = None  # the server is up
        job = pg_distlock.Queue(db.dsn).enqueue("after-restart", {})
        eventually(lambda: done == [job] or outcome, timeout=20, what="the job or the worker's end")
        assert not outcome, f"run() ended: {outcome[0]!r}"
        assert done == [job]
    finally:
        worker.stop()
        thread.join(30)
        server.close()


def test_a_client_made_while_the_server_starts_up_is_not_misconfigured(db: Db) -> None:
    server = FakeServer(PRIMARY, ("57P03", "the database system is starting up"))
    try:
        # Not even Unavailable: the pool keeps connecting in the background,
        # so a worker made from the client rides out the restart (review 33).
        pg_distlock.Client(dsn(server.port, db.name)).close()
    finally:
        server.close()


def test_a_worker_started_during_a_failover_waits_for_the_promoted_primary(db: Db) -> None:
    """target_session_attrs=read-write while only the standby answers (the
    primary is being failed over): libpq refuses with 'session is
    read-only'. The README promises that a worker with a multi-host conninfo
    finds the promoted standby; started in that window, it now dies."""
    server = FakeServer(STANDBY, None)  # for now the only host answering is a standby
    eventually(lambda: _standby_has(db), timeout=20, what="the standby to replay the database")
    done: list[int] = []
    conninfo = dsn(server.port, db.name, target_session_attrs="read-write")
    worker = pg_distlock.QueueWorker(conninfo, lambda job: done.append(job.id), wait=0.2, handle_signals=False)
    thread, outcome = run_in_thread(worker)
    try:
        time.sleep(1.5)
        server.target = PRIMARY  # promoted: the address now reaches a primary
        job = pg_distlock.Queue(db.dsn).enqueue("after-failover", {})
        eventually(lambda: done == [job] or outcome, timeout=20, what="the job or the worker's end")
        assert not outcome, f"run() ended: {outcome[0]!r}"
    finally:
        worker.stop()
        thread.join(30)
        server.close()


def _standby_has(db: Db) -> bool:
    try:
        with connect(dsn(STANDBY, db.name, connect_timeout=2)) as standby:
            return standby.execute("SELECT count(*) FROM pg_extension WHERE extname = 'pg_distlock'").fetchone() == (1,)
    except psycopg.Error:
        return False


# -- 2. "too many connections for role" is counted as refused for good


def test_a_role_at_its_connection_limit_is_retried_after_a_first_success(db: Db) -> None:
    """CONNECTION LIMIT counts the role's sessions now: once others end, a
    new one is let in. errors._REFUSED_FOR_GOOD lists 'too many connections
    for role', so a running worker whose reconnect meets the limit (a
    restart storm of a fleet sharing the role) raises Misconfigured and
    stops for good; it used to retry."""
    role = "rev47_limited"
    db.admin.execute(f"DROP ROLE IF EXISTS {role}")
    db.admin.execute(f"CREATE ROLE {role} LOGIN")
    db.admin.execute("SELECT distlock.grant_capability(%s, 'consumer')", (role,))
    conninfo = dsn(PRIMARY, db.name, user=role)

    def limit_reached_for_a_while() -> None:
        # The role's other sessions fill its limit; the worker's session ends.
        db.admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT 0")
        db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        time.sleep(1.5)
        db.admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT -1")

    try:
        worker_rides_out(db, conninfo, limit_reached_for_a_while)
    finally:
        db.admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT -1")
        db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        db.admin.execute(f"DROP OWNED BY {role}")
        db.admin.execute(f"DROP ROLE {role}")


def worker_rides_out(db: Db, conninfo: str, disturb: Callable[[], None]) -> None:
    """A QueueWorker of `conninfo` handles a job, `disturb()` runs, and it
    handles the next job without its run() having ended."""
    done: list[int] = []
    worker = pg_distlock.QueueWorker(conninfo, lambda job: done.append(job.id), wait=0.2, handle_signals=False)
    thread, outcome = run_in_thread(worker)
    try:
        first = pg_distlock.Queue(db.dsn).enqueue("one", {})
        eventually(lambda: done == [first] or outcome, what="the first job")
        assert not outcome, f"run() ended before the disturbance: {outcome[0]!r}"
        disturb()
        second = pg_distlock.Queue(db.dsn).enqueue("two", {})
        eventually(lambda: done == [first, second] or outcome, timeout=20, what="the second job or the end")
        assert not outcome, f"run() ended: {outcome[0]!r}"
    finally:
        worker.stop()
        thread.join(30)


# -- 3. The password in the message of a malformed conninfo


@pytest.mark.parametrize("conninfo, secret", [
    ("postgresql://app:Zk%q9s3cret@127.0.0.1:1/x", "s3cret"),
    ("host=127.0.0.1 port=1 dbname=x password=correct horse", "horse"),
], ids=["uri-percent", "keyword-space"])
def test_a_malformed_conninfo_does_not_show_its_password(conninfo: str, secret: str) -> None:
    """Misconfigured promises the conninfo 'without its password', but libpq's
    parse error quotes the token it could not parse, and that token is the
    password (a '%' in a URI password, a space in a keyword one)."""
    with pytest.raises(pg_distlock.Misconfigured) as raised:
        pg_distlock.Client(conninfo)
    assert secret not in str(raised.value), raised.value


# -- 4. A lock call's timeout bounding the pool's checkout


def test_a_try_lock_on_a_new_client_gets_a_connection(db: Db, name: str) -> None:
    """lock(timeout=0) (try once, do not wait for the lock) now gives the
    pool 0 s to hand out a connection: right after Client() the pool is
    still opening its first one, and the call raises Unavailable 'every
    connection of the pool is in use' (none is). It used to get the lock."""
    with pg_distlock.Client(db.dsn) as client:
        with client.lock(name, timeout=0) as held:
            assert held.held


def test_a_try_lock_while_another_lock_is_held_lets_the_pool_grow(db: Db, name: str) -> None:
    """min_size=1, max_size=10, one lock held: a second try-lock needs the
    pool to open a second connection, which 0 s does not allow."""
    with pg_distlock.Client(db.dsn, min_size=1, max_size=10) as client:
        with client.lock(name + "-a", timeout=5):
            with client.lock(name + "-b", timeout=0) as held:
                assert held.held



def test_a_busy_pool_with_its_own_connect_timeout_says_it_is_busy(db: Db, name: str) -> None:
    """A pool given by the caller with connect_timeout in its kwargs (as
    psycopg_pool's docs show): pool_timeout_cause probes with
    psycopg.connect(conninfo, **kwargs, **connect_timeout(conninfo, 2)), and
    connect_timeout() looks only at the conninfo, so the keyword is given
    twice: TypeError instead of Unavailable."""
    from psycopg_pool import ConnectionPool

    with ConnectionPool(db.dsn, min_size=1, max_size=1, kwargs={"connect_timeout": 5}, open=True) as pool:
        pool.wait()
        client = pg_distlock.Client(pool)
        with client.lock(name + "-a", timeout=5):
            with pytest.raises(pg_distlock.Unavailable):
                client.lock(name + "-b", timeout=0.5).acquire()


# -- 6. Leader.start() raising now: what it opened stays open


def test_a_leader_whose_start_raises_in_a_with_block_closes_its_connection(db: Db, monitor_role: str) -> None:
    """`with Leader(...)` whose start() raises (new: the first campaign's
    PermissionDenied) never reaches __exit__, so close() never runs and
    the connection opened for the campaign stays open for as long as the
    object lives (a service retrying its start leaks one per attempt).
    Before, start() returned and leaving the block closed it."""
    leader = pg_distlock.Leader(f"{db.dsn} user={monitor_role}", "reports", node="rev47-node", ttl=3)
    with pytest.raises(pg_distlock.PermissionDenied):
        with leader:
            pass
    left = lambda: db.value("SELECT count(*) FROM pg_stat_activity"  # noqa: E731
                            " WHERE datname = current_database() AND application_name = 'pg_distlock:leader:rev47-node'")
    time.sleep(0.5)
    assert left() == 0, "the campaign's connection is still open"


def test_a_leader_started_while_its_server_starts_up_campaigns_once_it_is_up(db: Db) -> None:
    """Leader.start() during a restart: _check_installed's first connect gets
    57P03 and raises Misconfigured (the README: 'for a conninfo that cannot
    connect'); it used to leave the campaign to retry."""
    server = FakeServer(PRIMARY, ("57P03", "the database system is starting up"))
    leader = pg_distlock.Leader(dsn(server.port, db.name), "reports", ttl=3)
    try:
        threading.Timer(1.0, lambda: setattr(server, "refusal", None)).start()
        leader.start()
        assert leader.wait_elected(timeout=15)
    finally:
        try:
            leader.close()
        except pg_distlock.DistlockError:
            pass
        server.close()


def test_a_leader_whose_role_meets_its_connection_limit_campaigns_again(db: Db) -> None:
    """A leader demoted by a lost connection whose reconnects meet the role's
    CONNECTION LIMIT for a moment: the campaign gets Misconfigured ('too
    many connections for role' is in _REFUSED_FOR_GOOD) and
    _cannot_campaign stops the node for good; it used to campaign again."""
    role = "rev47_leader"
    db.admin.execute(f"DROP ROLE IF EXISTS {role}")
    db.admin.execute(f"CREATE ROLE {role} LOGIN")
    db.admin.execute("SELECT distlock.grant_capability(%s, 'worker')", (role,))
    leader = pg_distlock.Leader(dsn(PRIMARY, db.name, user=role), "reports", ttl=2)
    try:
        leader.start()
        assert leader.wait_elected(timeout=10)
        db.admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT 0")
        db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        eventually(lambda: not leader.is_leader, what="the demotion")
        time.sleep(2.0)
        db.admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT -1")
        assert leader.wait_elected(timeout=15)
    finally:
        db.admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT -1")
        try:
            leader.close()
        except pg_distlock.DistlockError:
            pass
        db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        db.admin.execute(f"DROP OWNED BY {role}")
        db.admin.execute(f"DROP ROLE {role}")


# -- 7. Client() now connects when made: a server that does not answer


def test_client_construction_is_bounded_when_the_server_does_not_answer() -> None:
    """Client() used to return at once (its pool connects in the background);
    check_source now connects with no connect_timeout, so against a server
    that accepts TCP but does not answer (a stopped postmaster, a host
    behind a dropped route during a failover) Client() blocks for psycopg's
    default of 130 s, and then calls it Misconfigured ('check the
    conninfo's host and port')."""
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    outcome: list[BaseException | None] = []

    def make() -> None:
        try:
            pg_distlock.Client(dsn(int(hung.getsockname()[1]), "x")).close()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)

    thread = threading.Thread(target=make, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(15)
    assert outcome, f"Client() still blocked after {time.monotonic() - started:.0f} s"


async def test_an_asyncio_busy_pool_with_its_own_connect_timeout_says_it_is_busy(db: Db, name: str) -> None:
    """_async.pool_timeout_cause has the same doubled keyword."""
    from psycopg_pool import AsyncConnectionPool

    from pg_distlock import aio

    pool = AsyncConnectionPool(db.dsn, min_size=1, max_size=1, kwargs={"connect_timeout": 5}, open=False)
    await pool.open(wait=True)
    try:
        client = aio.Client(pool)
        async with client.lock(name + "-a", timeout=5):
            with pytest.raises(pg_distlock.Unavailable):
                await client.lock(name + "-b", timeout=0.5).acquire()
    finally:
        await pool.close()



# -- 8. "authentication failed" is also what an LDAP (RADIUS, ...) outage says


def test_a_worker_rides_out_an_ldap_outage(db: Db) -> None:
    """With `ldap` in pg_hba.conf, a server that cannot reach its LDAP
    server answers 'LDAP authentication failed for user' (the cause goes to
    the server log only), exactly what a wrong password gets. After a first
    success that used to be retried; now it is Misconfigured and the worker
    stops for good during a short LDAP outage. (Simulated by switching the
    role's pg_hba line to an LDAP server that does not answer, and back.)"""
    import os

    hba = os.path.join(os.environ["DISTLOCK_PY_PRIMARY_PGDATA"], "pg_hba.conf")
    with open(hba) as f:
        original = f.read()
    role = "rev47_ldap"
    db.admin.execute(f"DROP ROLE IF EXISTS {role}")
    db.admin.execute(f"CREATE ROLE {role} LOGIN")
    db.admin.execute("SELECT distlock.grant_capability(%s, 'consumer')", (role,))
    done: list[int] = []
    worker = pg_distlock.QueueWorker(dsn(PRIMARY, db.name, user=role, password="pw"),
                                     lambda job: done.append(job.id), wait=0.2, handle_signals=False)
    thread, outcome = run_in_thread(worker)

    def reload(text: str) -> None:
        with open(hba, "w") as f:
            f.write(text)
        db.admin.execute("SELECT pg_reload_conf()")
        time.sleep(0.3)

    try:
        first = pg_distlock.Queue(db.dsn).enqueue("one", {})
        eventually(lambda: done == [first] or outcome, what="the first job")
        assert not outcome, f"run() ended before the outage: {outcome[0]!r}"
        reload(f'host all {role} 127.0.0.1/32 ldap ldapserver=127.0.0.1 ldapport=1 ldapprefix="cn=" '
               f'ldapsuffix=",dc=x"\n' + original)
        db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        time.sleep(1.5)
        reload(original)
        second = pg_distlock.Queue(db.dsn).enqueue("two", {})
        eventually(lambda: done == [first, second] or outcome, timeout=20, what="the second job or the end")
        assert not outcome, f"run() ended: {outcome[0]!r}"
    finally:
        reload(original)
        worker.stop()
        thread.join(30)
        db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        db.admin.execute(f"DROP OWNED BY {role}")
        db.admin.execute(f"DROP ROLE {role}")


def test_a_saturated_pool_opens_no_connections_beyond_max_size(db: Db, name: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """max_size bounds the connections a Client opens. Now each lock call
    that times out on a busy pool makes pool_timeout_cause open one more
    connection (a probe, with the pool's conninfo) to tell 'busy' from
    'down': the busier the pool, the more connections the server gets, at
    the moment the application is already at its limit."""
    opened: list[str] = []
    real = psycopg.connect

    def counting(*args: Any, **kwargs: Any) -> Any:
        opened.append(str(args[0]) if args else "")
        return real(*args, **kwargs)

    with pg_distlock.Client(db.dsn, min_size=1, max_size=1) as client:
        with client.lock(name + "-a", timeout=5):
            monkeypatch.setattr(psycopg, "connect", counting)
            for _ in range(5):
                with pytest.raises(pg_distlock.Unavailable):
                    client.lock(name + "-b", timeout=0.2).acquire()
    assert opened == [], f"{len(opened)} connections opened beyond max_size=1"


def test_durations_do_not_round_up_to_the_next_unit() -> None:
    """inspect.durations.duration formats after rounding: 59.96 s reads
    '60.0 s', 999.6 ms '1000 ms', -0.1 ms '-0 ms'."""
    from datetime import timedelta

    from pg_distlock.inspect.durations import duration

    assert duration(timedelta(seconds=59.96)) != "60.0 s"
    assert duration(timedelta(milliseconds=999.6)) != "1000 ms"
    assert duration(timedelta(microseconds=-100)) != "-0 ms"


@pytest.mark.parametrize("secret_option", ["sslpassword=s3cretkey", "oauth_client_secret=s3cretoauth"])
def test_a_misconfigured_message_shows_no_secret_option(secret_option: str) -> None:
    """errors.shown_conninfo drops only `password`; libpq marks other
    options secret too (dispchar '*': sslpassword, the client key's
    passphrase, and libpq 18's oauth_client_secret), and they are shown."""
    with pytest.raises(pg_distlock.Misconfigured) as raised:
        pg_distlock.Client(f"host=127.0.0.1 port=1 dbname=x {secret_option}")
    assert "s3cret" not in str(raised.value), raised.value
