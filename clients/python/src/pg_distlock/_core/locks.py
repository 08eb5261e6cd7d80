"""distlock.lock with a bounded wait, as a hold the caller can lose.

A session lock lives exactly as long as the connection that took it, so the
client keeps that connection for the lock alone and probes it while the lock
is held: when it dies, the lock is gone and `lost` is set at once. The
transaction form is tied to the caller's open transaction instead.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import secrets
import socket
import threading
import weakref
from typing import Any, TypeVar

from . import effects as fx
from .base import Losable
from .loop import default_worker_id
from .keeper import MIN_CONNECT_WAIT, LostCallback, Seconds, interval, non_negative, positive, seconds
from ..errors import Cancelled, LockLost, LockTimeout, Unavailable

S = TypeVar("S")

LOCK_SQL = {
    str: "SELECT distlock.lock(p_key => %s::text, p_timeout => %s::interval, p_shared => %s, p_xact => %s)",
    int: "SELECT distlock.lock(p_key => %s::bigint, p_timeout => %s::interval, p_shared => %s, p_xact => %s)",
}
# The lock's owner set first (the FROM item runs before the call): one
# thread of control of this client, so that a deadlock through several of
# its connections is found (distlock.owner; Features.lock_owner). Only
# where the session's library defines the setting (one loaded before the
# extension's update does not, and its prefix is reserved); lock_id loads
# the library first on a fresh session (17+ without preload).
OWNED_LOCK_SQL = {
    kind: sql + " FROM (SELECT CASE WHEN distlock.lock_id('owner') IS NOT NULL"
    " AND pg_catalog.current_setting('distlock.owner', true) IS NOT NULL"
    " THEN pg_catalog.set_config('distlock.owner', %s, %s) END) AS owner"
    for kind, sql in LOCK_SQL.items()
}
UNLOCK_SQL = {
    str: "SELECT distlock.unlock(p_key => %s::text, p_shared => %s)",
    int: "SELECT distlock.unlock(p_key => %s::bigint, p_shared => %s)",
}


# Owner numbers are never reused (a thread's ident and a task's id are, and
# a later thread holding a dead one's name would wait for "itself"), and a
# process token keeps two processes apart that share a worker id (replicas
# of one service, or containers that all run as pid 1 on one host name);
# a forked child draws its own.
_owner_numbers = itertools.count(1)


def _draw_process_token() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


_process_token = _draw_process_token()


def _after_fork() -> None:
    global _process_token
    _process_token = _draw_process_token()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
_thread_owner = threading.local()
_task_owners: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
_task_owners_lock = threading.Lock()


def lock_owner(worker_id: str) -> str:
    """The owner of the locks the calling thread (or asyncio task) takes:
    one thread of control, which cannot release one lock while it waits
    for another; numbered once per thread or task, never reused. A lock's
    owner is the thread or task that acquired it."""
    try:
        task = asyncio.current_task()
    except RuntimeError:
        task = None
    if task is not None:
        with _task_owners_lock:
            number = _task_owners.get(task)
            if number is None:
                number = _task_owners[task] = next(_owner_numbers)
        return f"{worker_id}/{_process_token}/task-{number}"
    number = getattr(_thread_owner, "number", None)
    if number is None:
        number = _thread_owner.number = next(_owner_numbers)
    return f"{worker_id}/{_process_token}/thread-{number}"


def is_connection(source: Any) -> bool:
    return hasattr(source, "info") and hasattr(source, "autocommit")


class LockLogic(Losable[S]):
    lost_error = LockLost

    def __init__(
        self,
        source: S,
        key: str | int,
        timeout: Seconds | None = None,
        *,
        shared: bool = False,
        transaction: bool = False,
        check_every: Seconds = 1.0,
        on_lost: LostCallback | None = None,
    ) -> None:
        if transaction and not is_connection(source):
            raise ValueError("a transaction-level lock needs the connection whose transaction it joins, not a pool")
        super().__init__(source, on_lost)
        self._source = source
        self.key = key
        self._rt.label = f"pg_distlock:lock:{key}"
        self._lost.identify("lock", key)
        self.timeout = timeout if timeout is None else non_negative(timeout, "timeout")
        self.shared = shared
        self.transaction = transaction
        self.check_every = positive(check_every, "check_every")
        self._session: fx.Session | None = None
        self._stop: fx.Flag = self._rt.new_flag()
        self._watcher: fx.Task | None = None
        self.held = False
        # A Client sets its worker id here (HandsOut).
        self.lock_owner_id = default_worker_id()

    def _not_acquired(self) -> str:
        if self.timeout is None:
            return f"lock {self.key!r} was not acquired before the session's lock_timeout"
        return f"lock {self.key!r} was not acquired within {seconds(self.timeout):g} s"

    def _timed_out(self, cancelled: Cancelled) -> LockTimeout:
        """The session's statement_timeout (or a cancel) ending the lock's wait."""
        return LockTimeout(f"{self._not_acquired()}: {cancelled}", cancelled.sqlstate)

    def _key_type(self) -> type:
        return int if isinstance(self.key, int) else str

    def _acquire_op(self) -> fx.Gen[None]:
        if self.held:
            raise RuntimeError(f"lock {self.key!r} is already held by this object: release it first")
        timeout = None if self.timeout is None else interval(self.timeout)
        owner = lock_owner(self.lock_owner_id)
        if self.transaction:
            conn: Any = self._source
            if conn.autocommit and conn.info.transaction_status == 0:
                raise ValueError("a transaction-level lock needs an open transaction: use `with conn.transaction():`")
            sql, args = self._lock_statement((yield fx.Detect()), timeout, True, owner)
            try:
                got = yield fx.Execute(sql, args, in_caller_xact=True)
            except Cancelled as exc:
                raise self._timed_out(exc) from exc
            if not got[0][0]:
                raise LockTimeout(self._not_acquired())
            self.held = True
            self._lost.report("acquired")
            return
        # A lock call's timeout bounds getting its connection too, but
        # leaves at least a second for it (a try-lock's 0 would fail while
        # a new pool opens its first connection, or grows).
        session = yield fx.Open(timeout=None if self.timeout is None else max(self.timeout, MIN_CONNECT_WAIT))
        try:
            sql, args = self._lock_statement((yield fx.Detect(on=session)), timeout, False, owner)
            got = yield from fx.first(sql, args, on=session)
        except BaseException as exc:
            yield fx.Close(session, discard=True)
            if isinstance(exc, Cancelled):
                raise self._timed_out(exc) from exc
            raise
        if not got:
            yield fx.Close(session)
            raise LockTimeout(self._not_acquired())
        self._session, self.held = session, True
        self._lost.reset()
        self._stop = self._rt.new_flag()
        self._watcher = yield fx.Spawn(self._watching(session))
        self._lost.report("acquired")

    def _lock_statement(self, found: Any, timeout: Any, xact: bool, owner: str) -> tuple[str, tuple[Any, ...]]:
        """The lock call, with its owner where the server knows owners (a
        transaction-level lock's owner lasts as long as its transaction)."""
        args: tuple[Any, ...] = (self.key, timeout, self.shared, xact)
        if not found.lock_owner:
            return LOCK_SQL[self._key_type()], args
        return OWNED_LOCK_SQL[self._key_type()], (*args, owner, xact)

    def _watching(self, session: fx.Session) -> fx.Gen[None]:
        while not (yield fx.Sleep(self.check_every, self._stop)):
            if not (yield fx.Probe(session)):
                yield from self._lost.declare(f"lock {self.key!r} lost: the connection holding it died")
                return

    def _release_op(self) -> fx.Gen[bool]:
        """Gives the lock back; False when it had been lost (or was a
        transaction lock, which only the transaction's end releases)."""
        if not self.held:
            return False
        self.held = False
        if self.transaction:
            return False
        self._stop.set()
        if self._watcher is not None:
            yield fx.Join(self._watcher, timeout=self.check_every + 5.0)
        session, self._session = self._session, None
        assert session is not None
        unlocked = False
        if not self._lost.flag.is_set():
            try:
                unlocked = bool((yield from fx.first(UNLOCK_SQL[self._key_type()], (self.key, self.shared), on=session)))
            except Unavailable:
                unlocked = False
        yield fx.Close(session, discard=not unlocked)
        if unlocked:
            self._lost.report("released")
        return unlocked
