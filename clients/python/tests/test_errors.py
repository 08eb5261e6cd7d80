from __future__ import annotations

import uuid
from typing import Iterator

import psycopg
import pytest

import pg_distlock
from pg_distlock import (
    Cancelled, DistlockError, Fenced, InvalidArgument, LeaseLost, LockTimeout, NotFound, NotInstalled, PermissionDenied,
    Unavailable, errors,
)
from pg_distlock._core import effects as fx
from pg_distlock._sync import Runtime
from conftest import STANDBY, Db, connect, dsn, eventually, on_standby


def raised(source: object, sql: str) -> DistlockError:
    with pytest.raises(DistlockError) as info:
        Runtime(source).run(fx.execute(sql))  # type: ignore[arg-type]
    return info.value


@pytest.mark.parametrize("sql, sqlstate, cls", [
    ("SELECT distlock.acquire_lease(NULL, 'o', '1 second')", "22004", InvalidArgument),
    ("SELECT distlock.acquire_lease(' ', 'o', '1 second')", "22023", InvalidArgument),
    ("SELECT distlock.try_acquire_task_lock(987654, 'w')", "P0002", NotFound),
    ("SELECT distlock.release_task_lock({task}, 'w', 'completed')", "55000", LeaseLost),
    ("UPDATE versioned SET v = 1 WHERE id = 1", "40001", Fenced),
])
def test_server_errors_map_to_the_hierarchy(db: Db, sql: str, sqlstate: str, cls: type) -> None:
    [task] = db.add_tasks(1)
    db.admin.execute("CREATE TABLE versioned (id int PRIMARY KEY, v int NOT NULL DEFAULT 1)")
    db.admin.execute("CREATE TRIGGER bump BEFORE UPDATE ON versioned FOR EACH ROW EXECUTE FUNCTION distlock.bump_version('v')")
    db.admin.execute("INSERT INTO versioned VALUES (1, 1)")
    db.admin.execute("UPDATE versioned SET v = 1 WHERE id = 1")  # the row is now at version 2: v = 1 is stale
    error = raised(db.dsn, sql.format(task=task))
    assert type(error) is cls and error.sqlstate == sqlstate
    assert isinstance(error.__cause__, psycopg.Error)


@pytest.mark.parametrize("setting", ["lock_timeout", "statement_timeout"])
def test_the_sessions_own_timeouts_end_a_lock_call_with_lock_timeout(db: Db, name: str, setting: str) -> None:
    db.admin.execute("SELECT distlock.lock(%s)", (name,))
    with connect(db.dsn) as conn:
        conn.execute(f"SET {setting} = '50ms'")
        with pytest.raises(LockTimeout) as info:
            pg_distlock.lock(conn, name).acquire()
    assert info.value.sqlstate in ("55P03", "57014")


def test_a_statement_timeout_outside_a_lock_call_is_cancelled_not_a_lock_timeout(db: Db) -> None:
    queue = pg_distlock.Queue(db.dsn)
    queue.enqueue("cancelled-call")
    [job] = queue.consume()
    with connect(db.dsn) as blocker, blocker.transaction():
        blocker.execute("SELECT 1 FROM distlock.task_queue WHERE id = %s FOR UPDATE", (job.id,))
        with connect(db.dsn) as conn:
            conn.execute("SET statement_timeout = '200ms'")
            with pytest.raises(Cancelled) as info:
                pg_distlock.Queue(conn, worker_id=job.worker_id).complete(job)
    assert info.value.sqlstate == "57014" and not isinstance(info.value, LockTimeout)
    queue.close()


def test_claims_on_a_standby_are_unavailable(db: Db) -> None:
    eventually(lambda: on_standby(db, "SELECT true"), timeout=10, what="the database on the standby")
    error = raised(dsn(STANDBY, db.name), "SELECT distlock.acquire_lease('x', 'o', '1 second')")
    assert isinstance(error, Unavailable) and error.sqlstate == "25006"


def test_a_refused_connection_is_unavailable() -> None:
    error = raised(dsn(1, "postgres", connect_timeout=2), "SELECT 1")
    assert isinstance(error, Unavailable) and error.sqlstate is None


@pytest.fixture
def two_roles(db: Db) -> Iterator[tuple[str, str]]:
    roles = [f"r_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    for role in roles:
        db.admin.execute(f"CREATE ROLE {role} LOGIN")
        db.admin.execute("SELECT distlock.grant_capability(%s, 'worker')", (role,))
    yield roles[0], roles[1]
    for role in roles:
        db.admin.execute(f"DROP OWNED BY {role}")
        db.admin.execute(f"DROP ROLE {role}")


def test_another_roles_hold_is_permission_denied(db: Db, two_roles: tuple[str, str]) -> None:
    a, b = two_roles
    Runtime(f"{db.dsn} user={a}").run(fx.execute("SELECT distlock.acquire_lease('shared', 'o', '1 minute')"))
    error = raised(f"{db.dsn} user={b}", "SELECT distlock.release_lease('shared', 'o')")
    assert isinstance(error, PermissionDenied) and error.sqlstate == "42501"


def test_unknown_sqlstates_are_the_base_class() -> None:
    assert errors.error_class("XX000") is DistlockError
    assert errors.error_class("08006") is Unavailable


def test_a_missing_extension_says_how_to_install_it(db: Db) -> None:
    db.admin.execute("DROP EXTENSION pg_distlock")
    for call in (lambda: pg_distlock.Lease(db.dsn, "x", ttl=5).acquire(),
                 lambda: pg_distlock.Queue(db.dsn).enqueue("job"),
                 lambda: pg_distlock.generate_snowflake_id(db.dsn, 1)):
        with pytest.raises(NotInstalled, match=f"run CREATE EXTENSION pg_distlock in database '{db.name}'"):
            call()


@pytest.mark.parametrize("sqlstate, cls", [
    ("55P03", LockTimeout), ("57014", Cancelled),
    ("42501", PermissionDenied),
    ("55000", LeaseLost),
    ("40001", Fenced),
    ("22004", InvalidArgument), ("22023", InvalidArgument), ("22003", InvalidArgument), ("22008", InvalidArgument),
    ("P0002", NotFound),
    ("08006", Unavailable), ("08001", Unavailable), ("57P01", Unavailable), ("57P02", Unavailable),
    ("57P03", Unavailable), ("25006", Unavailable), ("53300", Unavailable),
    ("53000", errors.ResourceExhausted), ("53200", errors.ResourceExhausted),
    ("40P01", errors.Deadlock),
    ("XX000", DistlockError), ("42P01", DistlockError), (None, DistlockError),
])
def test_every_documented_sqlstate_maps_to_its_class(sqlstate: str | None, cls: type) -> None:
    """The README's table, row by row."""
    assert errors.error_class(sqlstate) is cls


@pytest.mark.parametrize("error", [
    Unavailable("cannot connect to host=a", "08006"),
    pg_distlock.RateLimited("over the limit", retry_after=1.5),
])
def test_a_probe_error_is_copied_whole_for_each_caller(error: DistlockError) -> None:
    """own_copy: each caller raises an error of its own, equal to the probe's
    (class, args, attributes, __cause__), with no traceback of its own yet."""
    from pg_distlock._sync import own_copy

    cause = psycopg.OperationalError("connection refused")
    try:
        raise error from cause
    except DistlockError:
        pass
    copy = own_copy(error)
    assert copy is not error and type(copy) is type(error)
    assert (copy.args, vars(copy), copy.sqlstate) == (error.args, vars(error), error.sqlstate)
    assert copy.__cause__ is cause and copy.__suppress_context__
    assert copy.__traceback__ is None and error.__traceback__ is not None
