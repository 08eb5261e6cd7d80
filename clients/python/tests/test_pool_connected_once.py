"""Whether a pool ever connected decides if a refusal is a wrong conninfo
(Misconfigured) or "not now" (Unavailable): a pool whose own worker is in
the middle of an attempt when the probe fails must not look connected
(test_review_consume_bound's missing-database test failed so in CI)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from pg_distlock import _async, _sync


class Stats:
    """A stand-in pool: its statistics show `attempts` connection attempts,
    the in-flight one failing `fails_after` seconds from now."""

    def __init__(self, attempts: int, errors: int, fails_after: float | None) -> None:
        self.attempts, self.errors = attempts, errors
        self.fails_at = None if fails_after is None else time.monotonic() + fails_after

    def get_stats(self) -> dict[str, Any]:
        errors = self.errors
        if self.fails_at is not None and time.monotonic() >= self.fails_at:
            errors += 1
        return {"connections_num": self.attempts, "connections_errors": errors}


def test_an_attempt_under_way_is_not_a_connection() -> None:
    assert _sync.pool_connected_once(Stats(1, 0, fails_after=0.05)) is False


def test_a_pool_that_connected_is_connected() -> None:
    assert _sync.pool_connected_once(Stats(2, 1, fails_after=None)) is True


def test_a_pool_that_never_tried_is_not_connected() -> None:
    assert _sync.pool_connected_once(Stats(0, 0, fails_after=None)) is False


def test_asyncio_an_attempt_under_way_is_not_a_connection() -> None:
    assert asyncio.run(_async.pool_connected_once(Stats(1, 0, fails_after=0.05))) is False  # type: ignore[arg-type]
    assert asyncio.run(_async.pool_connected_once(Stats(2, 1, fails_after=None))) is True  # type: ignore[arg-type]
