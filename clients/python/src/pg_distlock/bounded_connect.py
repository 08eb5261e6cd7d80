"""A connect bounded by `timeout` seconds in all, whatever the number of hosts
in the conninfo.

psycopg (as libpq) gives every host of a multi-host conninfo the whole
connect_timeout in turn, so a connect meant to end within 1 s took libpq's
least 2 s once per host that does not answer: 6 s on three. A bounded
connect here makes the attempts itself (psycopg's own list of them), each
given its share of what is left of the bound (left / hosts remaining, in
whole seconds, at least libpq's least 2 s), and starts another while any of
the bound is left: a silent first host does not keep a healthy later one
from being tried, and the connect ends at most libpq's 2 s past the bound
(the last attempt's least). Its errors read as psycopg's, so that
connect_errors.connect_failure tells a wrong conninfo from a server that
cannot serve now as before. An unbounded connect (timeout None) is
psycopg's own."""

from __future__ import annotations

import math
import time
from typing import Any, Iterator

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


def share(left: float, hosts: int) -> int:
    """The connect_timeout of an attempt with `left` seconds of the bound
    for `hosts` attempts still to make (this one included): an even share
    in whole seconds, at least libpq's least. Reaching a healthy later host
    matters more than a strict bound, so an attempt started with less than
    2 s left still gets 2 s: the connect may end up to 2 s past the bound."""
    return max(MIN_CONNECT_TIMEOUT, math.ceil(max(left, 0) / hosts))


class BoundedAttempts:
    """The attempts of one connect bounded by `timeout` seconds: what each
    is given, and the error once none succeeded (both flavours)."""

    def __init__(self, conninfo: str, kwargs: dict[str, Any], timeout: float) -> None:
        self.by = time.monotonic() + timeout
        self.options = {key: value for key, value in kwargs.items() if key in CONNECTION_OPTIONS}
        self.params = conninfo_to_dict(
            conninfo, **{key: value for key, value in kwargs.items() if key not in CONNECTION_OPTIONS})
        # A connect_timeout the user set is each attempt's, as with psycopg;
        # the bound still stops the attempts.
        self.own_timeout = "connect_timeout" in self.params
        self.failures: list[tuple[psycopg.Error, str]] = []
        self.attempt: dict[str, Any] = {}

    def each(self, attempts: list[dict[str, Any]]) -> Iterator[str]:
        """The conninfo of each of psycopg's `attempts`, given its share of
        what is left of the bound (share()), while any of it is left after
        a first attempt; failed() says why the last did not connect."""
        for tried, attempt in enumerate(attempts):
            left = self.by - time.monotonic()
            if self.failures and left <= 0:
                return
            self.attempt = attempt
            if not self.own_timeout:
                attempt = {**attempt, "connect_timeout": share(left, len(attempts) - tried)}
            yield make_conninfo("", **attempt)

    def failed(self, error: psycopg.Error) -> None:
        where = (self.attempt.get("host"), self.attempt.get("port"), self.attempt.get("hostaddr"))
        self.failures.append((error, "host: %r, port: %r, hostaddr: %r" % where))

    def error(self) -> psycopg.Error:
        """What psycopg raises when every attempt failed: the one failure,
        or the last one's type listing every attempt's."""
        last = self.failures[-1][0]
        if len(self.failures) == 1:
            return last
        lines = [str(last), "Multiple connection attempts failed. All failures were:"]
        lines.extend(f"- {where}: {error}" for error, where in self.failures)
        return type(last)("\n".join(lines), pgconn=last.pgconn)


def connect_within(conninfo: str, kwargs: dict[str, Any], timeout: float | None) -> psycopg.Connection[Any]:
    """psycopg.connect(conninfo, **kwargs) over all of the conninfo's
    hosts, ending within `timeout` seconds or at most libpq's least (2 s)
    past it (BoundedAttempts.each)."""
    if timeout is None:
        return psycopg.connect(conninfo, **kwargs)
    bound = BoundedAttempts(conninfo, kwargs, timeout)
    for attempt in bound.each(conninfo_attempts(bound.params)):
        try:
            return psycopg.connect(attempt, **bound.options)
        except psycopg.Error as exc:
            bound.failed(exc)
    raise bound.error()


async def connect_within_async(conninfo: str, kwargs: dict[str, Any],
                               timeout: float | None) -> psycopg.AsyncConnection[Any]:
    """connect_within for asyncio."""
    if timeout is None:
        return await psycopg.AsyncConnection.connect(conninfo, **kwargs)
    bound = BoundedAttempts(conninfo, kwargs, timeout)
    for attempt in bound.each(await conninfo_attempts_async(bound.params)):
        try:
            return await psycopg.AsyncConnection.connect(attempt, **bound.options)
        except psycopg.Error as exc:
            bound.failed(exc)
    raise bound.error()
