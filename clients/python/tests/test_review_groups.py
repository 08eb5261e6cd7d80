"""Job groups (3565118), as a fresh-eyes review attacked them: each test
fails at 3565118."""

from __future__ import annotations

from typing import Iterator

import pg_distlock
import pytest

from conftest import Db, drop_database, new_database


@pytest.fixture
def db_0_3_0() -> Iterator[Db]:
    database = new_database(version="0.3.0")
    yield database
    drop_database(database)


@pytest.mark.parametrize("many", [False, True])
def test_a_group_on_a_0_3_0_server_asks_for_the_update_not_for_create_extension(db_0_3_0: Db, many: bool) -> None:
    """Queue.enqueue(group=) / enqueue_many(group=) need pg_distlock 0.4.0
    (their docstrings say so). On a database whose SQL is still 0.3.0 the
    client raises NotInstalled, "pg_distlock is not installed in database
    ...: run CREATE EXTENSION pg_distlock", about a database where it is
    installed: an operator following it gets "extension already exists".
    Expected: an error that says the group needs 0.4.0 (ALTER EXTENSION
    pg_distlock UPDATE), as the features probe does for other 0.4.0 calls."""
    queue = pg_distlock.Queue(db_0_3_0.dsn)
    assert queue.enqueue("sync", queue="g030") > 0  # without a group, 0.3.0 serves it
    with pytest.raises(pg_distlock.DistlockError) as refused:
        if many:
            queue.enqueue_many("sync", [{}], queue="g030", group="customer:7")
        else:
            queue.enqueue("sync", queue="g030", group="customer:7")
    assert not isinstance(refused.value, pg_distlock.NotInstalled), (
        f"a 0.3.0 database is told to CREATE EXTENSION: {refused.value}")
    assert "UPDATE" in str(refused.value) or "0.4.0" in str(refused.value), str(refused.value)
