"""The exceptions pg_distlock calls raise, chosen by SQLSTATE.

Each server error keeps its SQLSTATE in ``sqlstate`` and the psycopg
exception as ``__cause__``, so nothing the server said is lost; callers
catch the few classes below instead of matching codes.
"""

from __future__ import annotations

import psycopg


class DistlockError(Exception):
    """Base of every error this package raises."""

    sqlstate: str | None = None

    def __init__(self, message: str, sqlstate: str | None = None) -> None:
        super().__init__(message)
        if sqlstate is not None:
            self.sqlstate = sqlstate


class LockTimeout(DistlockError):
    """Not acquired within the allowed wait (55P03, and 57014 in a lock call:
    the session's own lock_timeout or statement_timeout ended the wait)."""


class Cancelled(DistlockError):
    """57014 outside a lock call: statement_timeout or pg_cancel_backend ended
    the statement; nothing it would have done was done. (Worker waits for
    work that end so are an idle round instead.)"""


class PermissionDenied(DistlockError):
    """42501: the hold belongs to another role, or the role lacks the capability."""


NotHolder = PermissionDenied


class LeaseLost(DistlockError):
    """55000: the claim, lease or lock is no longer held by the caller (its TTL
    ran out, it was released, recovered or superseded, or its connection
    died). Stop the work; its result must not be recorded."""


class LockLost(LeaseLost):
    """The connection holding a session lock died, so the lock is gone."""


class Fenced(DistlockError):
    """40001: a fenced write carried a token or row version that is no longer
    current (a stale writer)."""


class RateLimited(DistlockError):
    """Refused by a rate limit; ``retry_after`` says how many seconds to wait
    (None when waiting cannot help: the request exceeds the limit)."""

    def __init__(self, message: str, retry_after: float | None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class InvalidArgument(DistlockError, ValueError):
    """A malformed or out-of-range argument: refused in Python before any
    round trip (named as the Python parameter, with its unit), or by the
    server (22xxx)."""


class NotFound(DistlockError):
    """P0002: an unknown task or job id."""


class Unavailable(DistlockError):
    """The server cannot serve the call here and now: the connection failed or
    was ended (08xxx, 57P01-57P03), it reached a standby (25006), or its
    session still runs the library from before an extension update
    (old_library). Reconnect, with a multi-host conninfo and
    target_session_attrs=read-write after a failover, and retry."""


ConnectionLost = Unavailable


class ResourceExhausted(DistlockError):
    """53xxx: a server table is full (rate-limit keys, locks per session)."""


class NotInstalled(DistlockError):
    """The database has no pg_distlock: run CREATE EXTENSION pg_distlock in it."""


class Misconfigured(Unavailable):
    """Connecting cannot succeed as configured, so retrying would only hide
    it (connect_errors.py): a malformed conninfo, a database or role that
    does not exist, no pg_hba.conf entry (always); a failed authentication,
    or no server answering where the conninfo points (a wrong host or port),
    before any connection of the object succeeded. The message names the
    conninfo (without its secrets), the cause and what to check. It is an
    Unavailable too, so that code written to fall back or retry on
    Unavailable still does; pg_distlock's own loops raise it at once."""


class Deadlock(DistlockError):
    """40P01: the lock wait closed a cycle; PostgreSQL chose this call to fail."""


_BY_SQLSTATE: dict[str, type[DistlockError]] = {
    "55P03": LockTimeout,
    "57014": Cancelled,
    "42501": PermissionDenied,
    "55000": LeaseLost,
    "40001": Fenced,
    "P0002": NotFound,
    "25006": Unavailable,
    "57P01": Unavailable,
    "57P02": Unavailable,
    "57P03": Unavailable,
    "53300": Unavailable,
    "40P01": Deadlock,
}

_BY_CLASS: dict[str, type[DistlockError]] = {
    "08": Unavailable,
    "22": InvalidArgument,
    "53": ResourceExhausted,
}


def error_class(sqlstate: str | None) -> type[DistlockError]:
    if sqlstate is None:
        return DistlockError
    return _BY_SQLSTATE.get(sqlstate) or _BY_CLASS.get(sqlstate[:2], DistlockError)


def _database_of(exc: psycopg.Error) -> str:
    name = getattr(exc, "distlock_database", None)
    return name if isinstance(name, str) else "(unknown)"


def old_library(exc: psycopg.Error) -> bool:
    """Whether the library guard refused a write (src/library_guard.rs): the
    session loaded pg_distlock's library before ALTER EXTENSION UPDATE. A
    library of 0.4.0 or later says so (55000); an older one has no guard
    function to call (42883). A new session loads the new library (with
    pg_distlock in shared_preload_libraries, once the server restarted)."""
    message = exc.diag.message_primary or ""
    # PostgreSQL translates its own words and quotes (lc_messages), never the
    # symbol's name; pg_distlock's own message is not translated.
    return ((exc.sqlstate == "55000" and "runs pg_distlock's library" in message)
            or (exc.sqlstate == "42883" and "distlock_library_guard" in message))


def session_must_go(exc: psycopg.Error) -> bool:
    """Whether the session that raised `exc` cannot serve the next call
    either, while a new one may: it loaded pg_distlock's library before an
    update (old_library), or it reached a read-only server (25006: a
    standby, or a primary demoted by a failover, where a new connection of
    a multi-host conninfo or a pool's next one finds the primary)."""
    return old_library(exc) or exc.sqlstate == "25006"


def translate(exc: psycopg.Error) -> DistlockError:
    """The DistlockError for a psycopg error; a failure without SQLSTATE is a
    lost or refused connection."""
    sqlstate = exc.sqlstate
    cls = error_class(sqlstate) if sqlstate else (
        Unavailable if isinstance(exc, psycopg.OperationalError) else DistlockError
    )
    message = exc.diag.message_primary if sqlstate and exc.diag.message_primary else str(exc)
    if old_library(exc):
        cls = Unavailable
        message = (f"{message} (this session loaded pg_distlock's library before the extension was updated: "
                   "reconnect; with pg_distlock in shared_preload_libraries, restart the server first)")
    elif sqlstate in ("3F000", "42883") and "distlock" in message:
        # schema "distlock" does not exist; function distlock.… does not exist
        database = _database_of(exc)
        cls = NotInstalled
        message = (f"pg_distlock is not installed in database {database!r} ({message}): "
                   f"run CREATE EXTENSION pg_distlock in database {database!r}")
    err = cls(message, sqlstate)
    err.__cause__ = exc
    return err
