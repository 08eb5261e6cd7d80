"""Keeping a hold with a TTL alive, and knowing the moment it is gone.

A renewer renews every `every` seconds; a watchdog declares the hold lost
once `ttl` has passed since the last renewal that was sent and confirmed,
even while a renewal hangs on a dead connection. The local deadline counts
from when the request was sent, before the server stamped its expiry, so it
never outlives the server's view of the hold.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import timedelta
from typing import Any, Callable

from . import effects as fx
from . import telemetry
from ..errors import InvalidArgument, LeaseLost, LockTimeout, Unavailable

log = logging.getLogger("pg_distlock")

Seconds = float | timedelta
LostCallback = Callable[[str], Any]


def seconds(value: Seconds) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def positive(value: Seconds, name: str) -> float:
    """`value` in seconds, refused unless it is a finite number above zero."""
    s = seconds(value)
    if not 0 < s < float("inf"):
        raise InvalidArgument(f"{name} must be a positive number of seconds, got {s:g}")
    return s


def non_negative(value: Seconds, name: str) -> float:
    s = seconds(value)
    if not 0 <= s < float("inf"):
        raise InvalidArgument(f"{name} must be zero or a positive number of seconds, got {s:g}")
    return s


def at_least(value: int, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise InvalidArgument(f"{name} must be an integer of at least {least}, got {value!r}")
    return value


def interval(value: Seconds) -> timedelta:
    return value if isinstance(value, timedelta) else timedelta(seconds=value)


class Lost:
    """A flag set once, with its reason and a callback run once. `then`, if
    given, is the logic's own reaction, run in its place."""

    def __init__(
        self,
        new_flag: Callable[[], fx.Flag],
        callback: LostCallback | None,
        then: Callable[[str], fx.Gen[None]] | None = None,
    ) -> None:
        self.flag: Any = new_flag()
        self.reason: str | None = None
        self.callback = callback
        self.then = then
        self._once = threading.Lock()
        self.primitive: str | None = None
        self.name = ""
        """What is held, for logs and telemetry (set by the owner)."""

    def identify(self, primitive: str, name: object) -> None:
        self.primitive, self.name = primitive, str(name)

    @property
    def log(self) -> logging.Logger:
        return telemetry.logger(self.primitive) if self.primitive else log

    def report(self, kind: str) -> None:
        if self.primitive:
            telemetry.emit(telemetry.Event(kind, self.primitive, self.name))

    def reset(self) -> None:
        self.flag.clear()
        self.reason = None

    def declare(self, reason: str, expected: bool = False) -> fx.Gen[None]:
        with self._once:
            if self.flag.is_set():
                return
            self.reason = reason
            self.flag.set()
        self.log.log(logging.INFO if expected else logging.WARNING, "pg_distlock: %s", reason)
        self.report("released" if expected else "lost")
        if self.then is not None:
            yield from self.then(reason)
        elif self.callback is not None:
            try:
                yield fx.Call(self.callback, (reason,))
            except Exception:
                self.log.exception("pg_distlock: the on_lost callback failed")

    def check(self, error: type[LeaseLost] = LeaseLost) -> None:
        if self.flag.is_set():
            raise error(self.reason or "lost")


class Keeper:
    def __init__(
        self,
        new_flag: Callable[[], fx.Flag],
        lost: Lost,
        ttl: float,
        every: float,
        renew: Callable[[], fx.Gen[bool]],
        what: str,
    ) -> None:
        self._new_flag = new_flag
        self.lost = lost
        self.ttl = ttl
        self.every = every
        self._renew = renew
        self.what = what
        self._stop: fx.Flag = new_flag()
        self._deadline = 0.0
        self._tasks: list[fx.Task] = []

    @property
    def deadline(self) -> float:
        """When the hold runs out, on time.monotonic(), unless renewed."""
        return self._deadline

    def start(self, sent_at: float) -> fx.Gen[None]:
        """Starts renewing a hold whose grant was requested at `sent_at`."""
        self._deadline = sent_at + self.ttl
        self._stop = self._new_flag()
        self._tasks = [(yield fx.Spawn(self._renewing())), (yield fx.Spawn(self._watching()))]

    def stop(self) -> fx.Gen[None]:
        self._stop.set()
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            yield fx.Join(task, timeout=self.every + 5.0)

    def _renewing(self) -> fx.Gen[None]:
        delay = self.every
        while not (yield fx.Sleep(delay, self._stop)) and not self.lost.flag.is_set():
            sent = time.monotonic()
            try:
                held = yield from self._renew()
            except Unavailable as exc:
                # Keep trying: the hold is still ours until the deadline, and a
                # failover or a reconnect may well come before it.
                delay = min(self.every, 0.5)
                self.lost.log.info("pg_distlock: renewing %s failed, retrying: %s", self.what, exc)
                continue
            except Exception as exc:
                yield from self.lost.declare(f"{self.what} lost: {exc}")
                return
            if not held:
                yield from self.lost.declare(f"{self.what} lost: the server no longer has it")
                return
            self._deadline = max(self._deadline, sent + self.ttl)
            self.lost.report("renewed")
            delay = self.every

    def _watching(self) -> fx.Gen[None]:
        while not self.lost.flag.is_set():
            remaining = self._deadline - time.monotonic()
            if remaining <= 0:
                yield from self.lost.declare(f"{self.what} lost: no renewal confirmed within its TTL of {self.ttl:g} s")
                return
            if (yield fx.Sleep(remaining, self._stop)):
                return


# The least time a call that waits leaves for getting its connection
# (seconds): a try (a wait of 0) would fail while a new pool opens its
# first connection, or grows.
MIN_CONNECT_WAIT = 1.0


def checkout_deadline(wait: float) -> float:
    """When a call that waits `wait` seconds must have got its connection
    (fx.Execute.checkout_by)."""
    return time.monotonic() + max(wait, MIN_CONNECT_WAIT)


def try_checkout_by(checkout_by: float) -> float:
    """A try's own checkout deadline within a call's `checkout_by`: each try
    gets at least MIN_CONNECT_WAIT, so that the last try of a wait, made as
    it runs out, is not refused for a pool busy for a moment (it would read
    as Unavailable where the answer is LockTimeout or RateLimited)."""
    return max(checkout_by, time.monotonic() + MIN_CONNECT_WAIT)


def retry_until(attempt: Callable[[float], fx.Gen[Any]], wait: float, what: str) -> fx.Gen[Any]:
    """Calls `attempt(checkout_by)` until it returns something other than
    None or False, backing off up to `wait` seconds; then LockTimeout. Each
    attempt's statement must get its connection by `checkout_by`, which
    `wait` also bounds (checkout_deadline), or within MIN_CONNECT_WAIT of
    the try (try_checkout_by)."""
    deadline = time.monotonic() + wait
    checkout_by = checkout_deadline(wait)
    delay = 0.02
    while True:
        result = yield from attempt(try_checkout_by(checkout_by))
        if result is not None and result is not False:
            return result
        left = deadline - time.monotonic()
        if left <= 0:
            raise LockTimeout(f"{what} was not acquired within {wait:g} s")
        yield fx.Sleep(min(delay, left))
        delay = min(delay * 2, 1.0)
