"""A connect bounded by `timeout` seconds in all, whatever the number of hosts
in the conninfo.

psycopg (as libpq) gives every host of a multi-host conninfo the whole
connect_timeout in turn, so a connect meant to end within 1 s took libpq's
least 2 s once per host that does not answer: 6 s on three, and a bound
shorter than that never reached a healthy later host at all. A bounded
connect here makes the attempts itself (psycopg's own list of them, in its
order), staggered within the bound (happy eyeballs, RFC 8305): the first at
once, each next one when those started have all failed or after an even
share of the bound (timeout / hosts), whichever comes first; none starts
once the bound has passed. The first to connect wins; the others are
abandoned (a late one's connection is closed). So a silent first host does
not keep a healthy later one from being tried within the bound, and the
connect ends by the bound, or when it is under libpq's least (2 s, which
each attempt is given at least), that long after it began. Its errors read
as psycopg's, so that connect_errors.connect_failure tells a wrong conninfo
from a server that cannot serve now as before. An unbounded connect
(timeout None) is psycopg's own.

psycopg resolves host names itself: each address is an attempt, and the
addresses of one host start together, at that host's turn. A connect_timeout
of the user's own (conninfo or keyword) only shortens each attempt; the
call's bound stands. Hosts that libpq alone knows of (a service file's, a
service= conninfo) are one attempt here: libpq tries them in turn within
that attempt's connect_timeout, so a silent first one of them can spend the
bound."""

from __future__ import annotations

import asyncio
import math
import queue
import threading
import time
from typing import Any, Awaitable, Callable, Iterator

import psycopg
from psycopg.conninfo import conninfo_attempts, conninfo_attempts_async, conninfo_to_dict, make_conninfo

# libpq's least connect_timeout (seconds): 1 is taken as 2.
MIN_CONNECT_TIMEOUT = 2

# Keyword arguments of psycopg's connect that are not connection parameters.
CONNECTION_OPTIONS = frozenset({"autocommit", "prepare_threshold", "context", "row_factory", "cursor_factory"})


def connect_timeout(conninfo: str, timeout: float | None, given: dict[str, Any] | None = None) -> dict[str, Any]:
    """libpq's connect_timeout for a connect bounded by `timeout` seconds
    (whole seconds, at least 2, as libpq counts them), unless the conninfo
    or the keyword arguments `given` set their own."""
    if timeout is None or "connect_timeout" in (given or {}):
        return {}
    try:
        if "connect_timeout" in conninfo_to_dict(conninfo):
            return {}
    except psycopg.Error:
        return {}  # the connect says what is wrong with it
    return {"connect_timeout": max(MIN_CONNECT_TIMEOUT, math.ceil(timeout))}


def attempt_timeout(left: float) -> int:
    """The connect_timeout of an attempt started with `left` seconds before
    the connect ends: whole seconds, at least libpq's least."""
    return max(MIN_CONNECT_TIMEOUT, math.ceil(max(left, 0)))


class BoundedAttempts:
    """The plan of one connect bounded by `timeout` seconds over psycopg's
    `attempts` (the module's docstring): when each may start, what each is
    given, and the error once none succeeded (both flavours)."""

    def __init__(self, conninfo: str, kwargs: dict[str, Any], timeout: float) -> None:
        self.started = time.monotonic()
        self.options = {key: value for key, value in kwargs.items() if key in CONNECTION_OPTIONS}
        self.params = conninfo_to_dict(
            conninfo, **{key: value for key, value in kwargs.items() if key not in CONNECTION_OPTIONS})
        self.timeout = timeout
        self.by = self.started + timeout
        # The call's bound is the contract: a connect_timeout the user set
        # (conninfo or keyword) may only shorten each attempt (0, libpq's
        # "wait for ever", does not; nor does what libpq refuses to read).
        self.own_timeout: int | None = None
        own = self.params.get("connect_timeout")
        try:
            if own is not None and int(own) > 0:
                self.own_timeout = max(MIN_CONNECT_TIMEOUT, int(own))
        except (TypeError, ValueError):
            pass  # libpq says what is wrong with it
        self.ends_by = max(self.by, self.started + MIN_CONNECT_TIMEOUT)
        self.attempts: list[dict[str, Any]] = []
        self.slots: list[int] = []
        self.hosts = 1
        self.failures: list[tuple[psycopg.Error, str]] = []

    def plan(self, attempts: list[dict[str, Any]]) -> None:
        """psycopg's `attempts`: one per address of each host (it resolves
        host names itself); the even share is per host, its addresses
        starting together."""
        self.attempts = attempts
        seen: dict[tuple[Any, Any], int] = {}
        for attempt in attempts:
            self.slots.append(seen.setdefault((attempt.get("host"), attempt.get("port")), len(seen)))
        self.hosts = max(len(seen), 1)

    def start_of(self, index: int) -> float:
        """When attempt `index` starts unless those before it all failed."""
        return self.started + self.slots[index] * self.timeout / self.hosts

    def may_start(self, index: int, running: int, now: float) -> bool:
        """Whether attempt `index` starts now, `running` attempts still
        connecting: the first at once; the next when all started failed
        (while the connect lasts: a bound under libpq's least still tries
        every host refused at once), or at its time within the bound."""
        if index >= len(self.attempts):
            return False
        if index == 0:
            return True
        if running == 0:
            return now < self.ends_by
        return now < self.by and now >= self.start_of(index)

    def next_event(self, index: int, now: float) -> float:
        """Until when to wait for an outcome before looking again."""
        if index < len(self.attempts) and now < self.by:
            return max(min(self.start_of(index), self.ends_by), now)
        return self.ends_by

    def conninfo_of(self, index: int, now: float) -> str:
        timeout = attempt_timeout(self.ends_by - now)
        if self.own_timeout is not None:
            timeout = min(timeout, self.own_timeout)
        return make_conninfo("", **{**self.attempts[index], "connect_timeout": timeout})

    def where(self, index: int) -> str:
        attempt = self.attempts[index]
        return "host: %r, port: %r, hostaddr: %r" % (
            attempt.get("host"), attempt.get("port"), attempt.get("hostaddr"))

    def failed(self, index: int, error: psycopg.Error) -> None:
        self.failures.append((error, self.where(index)))

    def error(self, still_connecting: list[int]) -> psycopg.Error:
        """What psycopg raises when no attempt connected: the one failure,
        or the last one's type listing every attempt's; an attempt still
        connecting when the connect ended counts as timed out."""
        for index in still_connecting:
            self.failures.append((psycopg.errors.ConnectionTimeout("connection timeout expired"), self.where(index)))
        last = self.failures[-1][0]
        if len(self.failures) == 1:
            return last
        lines = [str(last), "Multiple connection attempts failed. All failures were:"]
        lines.extend(f"- {where}: {error}" for error, where in self.failures)
        return type(last)("\n".join(lines), pgconn=last.pgconn)


def connect_within(conninfo: str, kwargs: dict[str, Any], timeout: float | None) -> psycopg.Connection[Any]:
    """psycopg.connect(conninfo, **kwargs) over all of the conninfo's
    hosts, ending within `timeout` seconds, or libpq's least (2 s) when
    that is longer (the module's docstring). Each attempt after the first
    runs in a daemon thread of its own."""
    if timeout is None:
        return psycopg.connect(conninfo, **kwargs)
    bound = BoundedAttempts(conninfo, kwargs, timeout)
    bound.plan(conninfo_attempts(bound.params))
    if len(bound.attempts) == 1:
        try:
            return psycopg.connect(bound.conninfo_of(0, time.monotonic()), **bound.options)
        except psycopg.Error as exc:
            bound.failed(0, exc)
            raise bound.error([])
    return SyncRace(bound).run()


class SyncRace:
    """The staggered attempts of connect_within, each in a thread of its own."""

    def __init__(self, bound: BoundedAttempts) -> None:
        self.bound = bound
        self.outcomes: queue.SimpleQueue[tuple[int, psycopg.Connection[Any] | psycopg.Error]] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.over = False

    def attempt(self, index: int, conninfo: str) -> None:
        outcome: psycopg.Connection[Any] | psycopg.Error
        try:
            outcome = psycopg.connect(conninfo, **self.bound.options)
        except psycopg.Error as exc:
            outcome = exc
        with self.lock:
            if not self.over:
                self.outcomes.put((index, outcome))
                return
        if isinstance(outcome, psycopg.Connection):
            outcome.close()  # too late: the connect ended without it

    def run(self) -> psycopg.Connection[Any]:
        bound = self.bound
        running: set[int] = set()
        index = 0
        try:
            while True:
                now = time.monotonic()
                if bound.may_start(index, len(running), now):
                    running.add(index)
                    threading.Thread(target=self.attempt, args=(index, bound.conninfo_of(index, now)),
                                     name="pg_distlock-connect", daemon=True).start()
                    index += 1
                    continue
                if not running:
                    raise bound.error([])
                try:
                    done, outcome = self.outcomes.get(timeout=max(bound.next_event(index, now) - now, 0.0))
                except queue.Empty:
                    if time.monotonic() >= bound.ends_by:
                        raise bound.error(sorted(running)) from None
                    continue
                running.discard(done)
                if isinstance(outcome, psycopg.Connection):
                    return outcome
                bound.failed(done, outcome)
        finally:
            with self.lock:
                self.over = True
            self.close_unclaimed()

    def close_unclaimed(self) -> None:
        """Closes connections that arrived after the winner, before the end."""
        while True:
            try:
                _, outcome = self.outcomes.get_nowait()
            except queue.Empty:
                return
            if isinstance(outcome, psycopg.Connection):
                outcome.close()


async def connect_within_async(conninfo: str, kwargs: dict[str, Any],
                               timeout: float | None) -> psycopg.AsyncConnection[Any]:
    """connect_within for asyncio: each attempt a task, the losers cancelled."""
    if timeout is None:
        return await psycopg.AsyncConnection.connect(conninfo, **kwargs)
    bound = BoundedAttempts(conninfo, kwargs, timeout)
    bound.plan(await conninfo_attempts_async(bound.params))

    def connect(index: int) -> Awaitable[psycopg.AsyncConnection[Any]]:
        return psycopg.AsyncConnection.connect(bound.conninfo_of(index, time.monotonic()), **bound.options)

    if len(bound.attempts) == 1:
        try:
            return await connect(0)
        except psycopg.Error as exc:
            bound.failed(0, exc)
            raise bound.error([])
    return await async_race(bound, connect)


async def async_race(bound: BoundedAttempts,
                     connect: Callable[[int], Awaitable[psycopg.AsyncConnection[Any]]]) -> psycopg.AsyncConnection[Any]:
    running: dict[asyncio.Task[psycopg.AsyncConnection[Any]], int] = {}
    index = 0
    try:
        while True:
            now = time.monotonic()
            if bound.may_start(index, len(running), now):
                running[asyncio.ensure_future(connect(index))] = index
                index += 1
                continue
            if not running:
                raise bound.error([])
            done, _ = await asyncio.wait(running, timeout=max(bound.next_event(index, now) - now, 0.0),
                                         return_when=asyncio.FIRST_COMPLETED)
            if not done:
                if time.monotonic() >= bound.ends_by:
                    raise bound.error(sorted(running.values()))
                continue
            for task in sorted(done, key=running.__getitem__):
                attempt = running.pop(task)
                error = task.exception()
                if error is None:
                    return task.result()
                if not isinstance(error, psycopg.Error):
                    raise error
                bound.failed(attempt, error)
    finally:
        abandon(list(running))


def abandon(tasks: list[asyncio.Task[psycopg.AsyncConnection[Any]]]) -> None:
    """Cancels the attempts still connecting, without waiting for them (a
    caller cancelled meanwhile must not lose the winner): one that connected
    all the same is closed when it ends."""
    for task in tasks:
        task.cancel()
        task.add_done_callback(close_if_connected)


def close_if_connected(task: asyncio.Task[psycopg.AsyncConnection[Any]]) -> None:
    """An abandoned attempt's end: its connection, if it made one, closed."""
    if task.cancelled():
        return
    if task.exception() is None:
        asyncio.ensure_future(task.result().close())
