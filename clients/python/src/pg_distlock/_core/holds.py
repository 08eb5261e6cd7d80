"""Leases and semaphore slots: rows with a TTL that a background renewer
keeps alive while the holder works, released when it is done."""

from __future__ import annotations

import os
import socket
import time
import uuid
import sys
from typing import Any, TypedDict, TypeVar

if sys.version_info >= (3, 11):
    from typing import Unpack
else:
    from typing_extensions import Unpack

from . import effects as fx
from .base import Losable
from .keeper import Keeper, LostCallback, Seconds, at_least, interval, non_negative, positive, retry_until
from .loop import default_worker_id
from ..errors import LeaseLost, Unavailable

S = TypeVar("S")


# The server's limit on an owner (MAX_NAME_BYTES in src/text.rs).
OWNER_MAX_BYTES = 1000


def holder_token() -> str:
    """`<host>:<pid>:<random>`, drawn anew by each call."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def default_owner(worker_id: str | None = None) -> str:
    """`<worker_id>/<host>:<pid>:<random>`: the worker id (a Client's, else
    host:pid) comes first so that a monitor can tell whose hold it is (the
    console groups holds by what precedes the last '/'). Unique per holder
    object: two holders in one process must not share an owner string, or
    each would renew and release the other's hold. The server takes owners
    of at most OWNER_MAX_BYTES: a longer worker id is cut (at a whole
    character) so that the token, which makes the owner unique, stays."""
    token = holder_token()
    room = OWNER_MAX_BYTES - len(token.encode()) - 1
    worker = (worker_id or default_worker_id()).encode()[:max(room, 0)].decode("utf-8", "ignore")
    return f"{worker}/{token}"


class HoldOptions(TypedDict, total=False):
    wait: Seconds
    """How long acquire() keeps trying while others hold it (0: once)."""
    renew_every: Seconds | None
    """Default ttl/3."""
    on_lost: LostCallback | None


class TtlHold(Losable[S]):
    """What Lease and Semaphore share; subclasses say how to take, renew and
    give back their row."""

    kind = "hold"

    def __init__(
        self, source: S, name: str, owner: str | None = None, ttl: Seconds = 30.0, **options: Unpack[HoldOptions]
    ) -> None:
        super().__init__(source, options.get("on_lost"))
        self.name = name
        self._given_owner = owner
        self._adopt_worker_id(None)
        self.ttl = positive(ttl, "ttl")
        self.wait = non_negative(options.get("wait", 0.0), "wait")
        renew_every = options.get("renew_every")
        every = positive(renew_every, "renew_every") if renew_every is not None else self.ttl / 3
        self._lost.identify(self.kind, name)
        self._keeper = Keeper(self._rt.new_flag, self._lost, self.ttl, every, self._renew, f"{self.kind} {name!r}")
        self.held = False

    def _adopt_worker_id(self, worker_id: str | None) -> None:
        """The owner: the one given, else a default naming `worker_id` (a
        Client sets its own here, HandsOut)."""
        self.owner = self._given_owner or default_owner(worker_id)
        self._rt.label = f"pg_distlock:{self.kind}:{self.owner}"

    def _take(self, checkout_by: float) -> fx.Gen[Any]:
        """One attempt of acquire(), whose connection must be had by
        `checkout_by`. Not so a renewal: a hold is not lost while the pool
        is busy for a while, only once its TTL passes unconfirmed."""
        raise NotImplementedError

    def _renew(self) -> fx.Gen[bool]:
        raise NotImplementedError

    def _give_back(self) -> fx.Gen[bool]:
        raise NotImplementedError

    def _acquire_op(self) -> fx.Gen[Any]:
        if self.held:
            # A second renewer would outlive the release of the first.
            raise RuntimeError(f"{self.kind} {self.name!r} is already held by this object: release it first")
        sent = time.monotonic()

        def attempt(checkout_by: float) -> fx.Gen[Any]:
            nonlocal sent
            sent = time.monotonic()
            return (yield from self._take(checkout_by))

        granted = yield from retry_until(attempt, self.wait, f"{self.kind} {self.name!r}")
        self._lost.reset()
        self.held = True
        yield from self._keeper.start(sent)
        self._lost.report("acquired")
        return granted

    def _release_op(self) -> fx.Gen[bool]:
        """Stops renewing and gives the hold back; True if it was still held."""
        if not self.held:
            return False
        self.held = False
        yield from self._keeper.stop()
        try:
            released = yield from self._give_back()
        except (Unavailable, LeaseLost):
            return False
        if released:
            self._lost.report("released")
        return released


class LeaseLogic(TtlHold[S]):
    kind = "lease"
    token: int | None = None

    def _take(self, checkout_by: float) -> fx.Gen[Any]:
        self.token = yield from fx.first(
            "SELECT distlock.acquire_lease(%s, %s, %s)", (self.name, self.owner, interval(self.ttl)),
            checkout_by=checkout_by,
        )
        return self.token

    def _renew(self) -> fx.Gen[bool]:
        return bool((yield from fx.first(
            "SELECT distlock.renew_lease(%s, %s, %s)", (self.name, self.owner, interval(self.ttl))
        )))

    def _give_back(self) -> fx.Gen[bool]:
        return bool((yield from fx.first("SELECT distlock.release_lease(%s, %s)", (self.name, self.owner))))


class SemaphoreLogic(TtlHold[S]):
    """One of `max` places of a semaphore."""

    kind = "semaphore"

    def __init__(
        self, source: S, name: str, max: int, owner: str | None = None, ttl: Seconds = 30.0,
        **options: Unpack[HoldOptions],
    ) -> None:
        self.max = at_least(max, "max", 1)
        super().__init__(source, name, owner, ttl, **options)

    def _take(self, checkout_by: float) -> fx.Gen[Any]:
        return (yield from self._acquire_semaphore(checkout_by))

    def _renew(self) -> fx.Gen[bool]:
        # acquire_semaphore renews the owner's place when it has one.
        return (yield from self._acquire_semaphore(None))

    def _acquire_semaphore(self, checkout_by: float | None) -> fx.Gen[bool]:
        return bool((yield from fx.first(
            "SELECT distlock.acquire_semaphore(%s, %s, %s, %s)", (self.name, self.max, self.owner, interval(self.ttl)),
            checkout_by=checkout_by,
        )))

    def _give_back(self) -> fx.Gen[bool]:
        return bool((yield from fx.first("SELECT distlock.release_semaphore(%s, %s)", (self.name, self.owner))))
