"""What the shared logic asks a driver to do.

Every operation is a generator that yields these effects and receives their
results (or has their errors thrown in). The blocking driver performs them
with threads and psycopg.Connection, the asyncio driver with tasks and
psycopg.AsyncConnection, so one copy of each algorithm serves both APIs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generator, Mapping, Protocol, Sequence, TypeVar

T = TypeVar("T")

Gen = Generator["Effect", Any, T]
Rows = list[tuple[Any, ...]]
NamedRows = list[dict[str, Any]]


class Flag(Protocol):
    """threading.Event or asyncio.Event: what the logic sets and tests."""

    def set(self) -> None: ...

    def clear(self) -> None: ...

    def is_set(self) -> bool: ...


class Channel(Protocol):
    """queue.SimpleQueue or asyncio.Queue behind one face: what the logic
    hands from one task to another (jobs to run, jobs finished)."""

    def put(self, item: Any) -> None:
        """Adds an item without blocking (the channel is unbounded)."""

    def take(self) -> Any:
        """The oldest item, or None when there is none, without blocking."""


class Session(Protocol):
    """A connection the logic keeps across calls (a session lock, a claim)."""


class Task(Protocol):
    """A spawned generator running concurrently (a thread or an asyncio task)."""


@dataclass(frozen=True)
class Execute:
    """Runs one statement, in a transaction of its own unless `in_caller_xact`
    (a savepoint when the caller's connection is inside a transaction), on
    `on` or on any connection of the source. Returns the rows."""

    sql: str
    params: Sequence[Any] | Mapping[str, Any] = ()
    on: Session | None = None
    in_caller_xact: bool = False
    checkout_by: float | None = None
    """When (time.monotonic()) getting a connection of the source must have
    succeeded (a pool's checkout, a new connection's connect_timeout), or
    Unavailable naming why not, as Open(timeout) raises; None: the source's
    own limits. Unused with `on` or a connection source."""
    named: bool = False
    """Rows as dicts by column name (NamedRows): for a result whose columns
    differ between releases of the server."""


@dataclass(frozen=True)
class Probe:
    """Asks whether `on` is still connected without disturbing a transaction
    the caller has open on it. Returns a bool."""

    on: Session


@dataclass(frozen=True)
class Detect:
    """The Features of the server behind `on` (or any connection), looked up
    once per connection."""

    on: Session | None = None
    checkout_by: float | None = None
    """As Execute's: when getting a connection must have succeeded."""
    fresh: bool = False
    """Look again rather than answer from the connection's cache: the
    extension may have been updated since (ALTER EXTENSION UPDATE)."""


@dataclass(frozen=True)
class Open:
    """A connection for the logic alone (the caller's own when the source is a
    single connection). Returns a Session."""

    timeout: float | None = None
    """At most about this many seconds to get it (a pool's checkout, a new
    connection's connect_timeout); None: the source's own limits."""


@dataclass(frozen=True)
class Close:
    """Gives a Session back; `discard` closes the connection first, because
    it may still hold something (a session lock that could not be unlocked)."""

    session: Session
    discard: bool = False


@dataclass(frozen=True)
class Sleep:
    """Waits `seconds`, or until `until` is set. Returns True if it was set."""

    seconds: float
    until: Flag | None = None


@dataclass(frozen=True)
class Call:
    """Calls user code (a handler or callback); awaits it in the asyncio driver.
    Once `cancel` is set, the asyncio driver cancels a handler still running
    and raises HandlerCancelled (a blocking handler can only be asked, by the
    flag it was given)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...] = ()
    cancel: Flag | None = None


class HandlerCancelled(Exception):
    """A handler the worker's stop(timeout) cancelled before it returned."""


@dataclass(frozen=True)
class Receive:
    """Waits up to `timeout` seconds (None: no limit) for an item of
    `channel`. Returns it, or None once the time ran out."""

    channel: Channel
    timeout: float | None = None


@dataclass(frozen=True)
class Spawn:
    gen: Gen[Any]


@dataclass(frozen=True)
class Join:
    """Waits for a spawned generator, at most `timeout` seconds (None: no limit).
    Returns its result; raises what it raised."""

    task: Task
    timeout: float | None = None


Effect = Execute | Probe | Detect | Open | Close | Sleep | Call | Receive | Spawn | Join


def execute(
    sql: str, params: Sequence[Any] | Mapping[str, Any] = (), on: Session | None = None,
    checkout_by: float | None = None,
) -> Gen[Rows]:
    rows: Rows = yield Execute(sql, params, on, checkout_by=checkout_by)
    return rows


def execute_named(
    sql: str, params: Sequence[Any] | Mapping[str, Any] = (), on: Session | None = None,
    checkout_by: float | None = None,
) -> Gen[NamedRows]:
    """execute(), each row a dict by column name."""
    rows: NamedRows = yield Execute(sql, params, on, checkout_by=checkout_by, named=True)
    return rows


def first(
    sql: str, params: Sequence[Any] | Mapping[str, Any] = (), on: Session | None = None,
    checkout_by: float | None = None,
) -> Gen[Any]:
    """The first column of the first row, None without rows."""
    rows = yield from execute(sql, params, on, checkout_by)
    return rows[0][0] if rows else None
