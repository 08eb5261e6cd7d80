"""Rate limits: GCRA throttling with the server's retry delay, fixed windows."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TypeVar

from . import effects as fx
from .base import Bound
from .keeper import Seconds, at_least, checkout_deadline, non_negative, positive, try_checkout_by
from ..errors import RateLimited

S = TypeVar("S")


@dataclass(frozen=True)
class Throttle:
    allowed: bool
    limit: int
    remaining: int
    retry_after: float | None
    """Seconds until the request would be allowed; None when allowed, or when
    the quantity exceeds the limit (waiting cannot help)."""
    reset_after: float
    """Seconds until the limit is fully replenished."""


def bounded_checkout(timeout: Seconds | None) -> float | None:
    """The checkout deadline of a call that answers at once but must get its
    connection within `timeout` seconds (at least MIN_CONNECT_WAIT); None:
    the pool's own timeout."""
    return None if timeout is None else checkout_deadline(non_negative(timeout, "timeout"))


def throttle_op(
    key: str, max_burst: int, count_per_period: int, period: Seconds, quantity: int = 1,
    checkout_by: float | None = None,
) -> fx.Gen[Throttle]:
    at_least(max_burst, "max_burst", 0)
    at_least(count_per_period, "count_per_period", 1)
    at_least(quantity, "quantity", 0)
    rows = yield from fx.execute(
        "SELECT allowed, \"limit\", remaining, retry_after_ms, reset_after_ms FROM distlock.throttle(%s, %s, %s, %s, %s)",
        (key, max_burst, count_per_period, positive(period, "period"), quantity), checkout_by=checkout_by,
    )
    allowed, limit, remaining, retry_ms, reset_ms = rows[0]
    retry = None if allowed or retry_ms is None or retry_ms < 0 else retry_ms / 1000.0
    return Throttle(bool(allowed), limit, remaining, retry, reset_ms / 1000.0)


def check_rate_limit_op(key: str, max_requests: int, window_seconds: int) -> fx.Gen[bool]:
    at_least(max_requests, "max_requests", 1)
    at_least(window_seconds, "window_seconds", 1)
    return bool((yield from fx.first("SELECT distlock.check_rate_limit(%s, %s, %s)", (key, max_requests, window_seconds))))


class RateLimiterLogic(Bound[S]):
    """GCRA limit on one key: `max_burst + 1` at once, refilled at
    `count_per_period` per `period`."""

    def __init__(self, source: S, key: str, max_burst: int, count_per_period: int, period: Seconds) -> None:
        super().__init__(source)
        self.key = key
        self._rt.label = f"pg_distlock:rate_limiter:{key}"
        self.max_burst = at_least(max_burst, "max_burst", 0)
        self.count_per_period = at_least(count_per_period, "count_per_period", 1)
        self.period = positive(period, "period")

    def _try_acquire_op(self, quantity: int = 1, checkout_by: float | None = None) -> fx.Gen[Throttle]:
        return (yield from throttle_op(self.key, self.max_burst, self.count_per_period, self.period, quantity,
                                       checkout_by))

    def _acquire_op(self, quantity: int = 1, timeout: Seconds | None = None) -> fx.Gen[Throttle]:
        """Waits the server's retry delay until allowed; RateLimited when that
        would take longer than `timeout` or can never succeed. `timeout`
        also bounds getting a connection (keeper.checkout_deadline)."""
        wait = None if timeout is None else non_negative(timeout, "timeout")
        deadline = None if wait is None else time.monotonic() + wait
        checkout_by = None if wait is None else checkout_deadline(wait)
        while True:
            try_by = None if checkout_by is None else try_checkout_by(checkout_by)
            result = yield from self._try_acquire_op(quantity, try_by)
            if result.allowed:
                return result
            if result.retry_after is None:
                raise RateLimited(f"{quantity} exceeds the limit of {self.key!r} ({result.limit})", None)
            if deadline is not None and time.monotonic() + result.retry_after > deadline:
                raise RateLimited(f"rate limit {self.key!r}: retry in {result.retry_after:.3f} s", result.retry_after)
            yield fx.Sleep(result.retry_after)
