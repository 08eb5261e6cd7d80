"""Dedup windows (1e92c31), as a fresh-eyes review attacked them: each test
fails at 1e92c31."""

from __future__ import annotations

from datetime import timedelta

import pg_distlock
import pytest

from conftest import Db


@pytest.mark.parametrize("window", [1e15, timedelta(days=999_999_999)])
def test_a_huge_unique_for_is_refused_as_an_invalid_argument(db: Db, window: object) -> None:
    """Queue.enqueue(unique_for=) turns the seconds into a timedelta
    (keeper.interval): a window beyond timedelta's range raises Python's
    OverflowError ("Python int too large to convert to C int"), which is
    no DistlockError, and one within it but past ~6,700 years reaches the
    server, whose archive lookup fails with 22008 "timestamp out of range"
    after the insert. Expected: InvalidArgument naming unique_for, refused
    before any round trip (as positive() does for 0 and infinity)."""
    queue = pg_distlock.Queue(db.dsn)
    with pytest.raises(pg_distlock.InvalidArgument) as refused:
        queue.enqueue("sync", queue="dedup", unique_key="k", unique_for=window)  # type: ignore[arg-type]
    assert "unique_for" in str(refused.value), str(refused.value)


def test_a_sub_microsecond_unique_for_accepted_by_the_client_is_not_refused_by_the_server(db: Db) -> None:
    """positive() accepts 1e-7 seconds; timedelta rounds it to 0, and the
    server refuses "p_unique_for must be positive, got 00:00:00", naming the
    SQL parameter and a value the caller did not give. Expected: refused in
    Python as unique_for (or rounded up to a microsecond)."""
    queue = pg_distlock.Queue(db.dsn)
    try:
        queue.enqueue("sync", queue="dedup", unique_key="k", unique_for=1e-7)
    except pg_distlock.DistlockError as e:
        assert "p_unique_for" not in str(e), f"the server refused what the client accepted: {e}"
