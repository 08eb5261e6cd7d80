"""Whole-diff review 16 (ce78f07..b0c2848), as a fresh-eyes review attacked
job groups and dedup windows from the Python client: each test fails at
b0c2848."""

from __future__ import annotations

from typing import Iterator

import pg_distlock
import pytest

from conftest import Db, connect, drop_database, new_database


@pytest.fixture
def db_0_3_0() -> Iterator[Db]:
    database = new_database(version="0.3.0")
    yield database
    drop_database(database)


@pytest.mark.parametrize("argument", ["group", "unique_for", "many"])
def test_review_whole16_a_group_works_once_the_update_ran_without_reconnecting(db_0_3_0: Db, argument: str) -> None:
    """A producer process with a long-lived connection, running while the
    operator updates the extension (docs/upgrading.md: "update, then use
    groups"). Before the update, Queue.enqueue(group=...) rightly raises
    "group needs pg_distlock 0.4.0 in the database: run ALTER EXTENSION
    pg_distlock UPDATE" (55000). The operator runs the update, as told. The
    client's features were detected once per connection and are cached for
    its life (_sync.py, Detect): the producer keeps getting the same 55000,
    telling the operator to run an update that already ran, until the
    process reconnects. Expected: once the server's functions take p_group
    and p_unique_for, the call goes through (a cached "too old" answer is
    looked up again before raising)."""
    conn = connect(db_0_3_0.dsn)
    try:
        queue = pg_distlock.Queue(conn)
        kwargs: dict[str, object] = (
            {"group": "customer:7"} if argument in ("group", "many")
            else {"unique_key": "account:7", "unique_for": 60}
        )

        def call() -> object:
            if argument == "many":
                return queue.enqueue_many("sync", [{}], queue="w16", group="customer:7")
            return queue.enqueue("sync", queue="w16", **kwargs)

        with pytest.raises(pg_distlock.DistlockError) as before:
            call()
        assert before.value.sqlstate == "55000", str(before.value)
        db_0_3_0.admin.execute("ALTER EXTENSION pg_distlock UPDATE")
        assert db_0_3_0.value("SELECT extversion FROM pg_extension WHERE extname = 'pg_distlock'") == "0.4.0"
        try:
            call()
        except pg_distlock.DistlockError as after:
            pytest.fail(f"after ALTER EXTENSION pg_distlock UPDATE, the same connection still refuses: {after}")
        assert db_0_3_0.value("SELECT count(*) FROM distlock.jobs WHERE queue = 'w16'") == 1
    finally:
        conn.close()


def test_review_whole16_unique_for_given_as_text_is_refused_by_name(db: Db) -> None:
    """Queue.enqueue(unique_for=...) is typed Seconds (a number or a
    timedelta); other arguments of that type (run_after's waits, leases,
    missed_runs_grace since 4953ea1) refuse anything else with
    InvalidArgument naming the argument. unique_window() checks a string
    through float() ("10" passes) and then builds timedelta(seconds="10"):
    a bare TypeError from deep in the client, naming nothing. Expected:
    InvalidArgument naming unique_for, as missed_runs_grace got."""
    queue = pg_distlock.Queue(db.dsn)
    with pytest.raises(pg_distlock.InvalidArgument) as refused:
        queue.enqueue("sync", queue="w16", unique_key="account:7", unique_for="10")  # type: ignore[arg-type]
    assert "unique_for" in str(refused.value)
