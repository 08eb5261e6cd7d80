"""Leader election: campaign every TTL/3, and while elected keep the
leadership with the same renewer and watchdog as a lease.

Two processes must never both report leadership. The server ends a term
`ttl` after the renewal that confirmed it was stamped, which is after the
client sent it; so `is_leader` is true only until `sent + ttl - margin`, on
this process's monotonic clock, whatever its threads are doing: a leader
that was frozen (SIGSTOP, a long GC pause), whose backend hangs, or whose
watchdog has not run yet reads False the moment its term could have
ended. Renewal starts before on_elected runs, and the callbacks run on a
task of their own, so a slow callback never delays a renewal. A callback
that raises is logged, makes the node resign and stop campaigning, and is
raised again by wait_elected() and stop().
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, TypeVar

from . import effects as fx
from .base import Bound
from .features import require_installed
from . import telemetry
from .holds import default_owner
from .keeper import Keeper, Lost, Seconds, interval, positive
from ..errors import InvalidArgument, Misconfigured, NotInstalled, PermissionDenied, Unavailable

S = TypeVar("S")

log = telemetry.logger("leader")

CAMPAIGN_SQL = "SELECT is_leader, term, leader FROM distlock.try_become_leader(%s, %s, %s)"
RESIGN_SQL = "SELECT distlock.resign_leader(%s, %s)"


# What no later campaign can change: the role lacks the capability or the
# group is outside its scope, the extension is missing, the conninfo cannot
# work, or the server refuses an argument.
CANNOT_CAMPAIGN = (PermissionDenied, NotInstalled, Misconfigured, InvalidArgument)

# How long start() waits for the first campaign's answer (seconds).
FIRST_CAMPAIGN_WAIT = 5.0
# How often a campaign that keeps failing for an unavailable server says so.
UNAVAILABLE_LOG_EVERY = 300.0


def safety_margin(ttl: float) -> float:
    """How long before the server could end a term the node stops calling
    itself leader: a tenth of the TTL, between 50 ms and 1 s (clock rates
    of two machines differ by far less)."""
    return min(max(ttl * 0.1, 0.05), 1.0)


class LeaderLogic(Bound[S]):
    def __init__(
        self,
        source: S,
        group: str,
        node: str | None = None,
        ttl: Seconds = 10.0,
        *,
        on_elected: Callable[[int], Any] | None = None,
        on_demoted: Callable[[str], Any] | None = None,
        campaign_every: Seconds | None = None,
        handle_signals: bool = False,
    ) -> None:
        super().__init__(source)
        self.group = group
        self._given_node = node
        self._adopt_worker_id(None)
        self.ttl = positive(ttl, "ttl")
        self.every = positive(campaign_every, "campaign_every") if campaign_every is not None else self.ttl / 3
        self.margin = safety_margin(self.ttl)
        self._rt.accept_callable(on_elected, "on_elected")
        self._rt.accept_callable(on_demoted, "on_demoted")
        self.on_elected = on_elected
        self.on_demoted = on_demoted
        self.handle_signals = handle_signals
        self.elected: Any = self._rt.new_flag()
        """An Event set while this node is elected; is_leader also checks the
        term's local deadline."""
        self.term: int | None = None
        self.leader: str | None = None
        """The node the server last named as leader."""
        self.failure: BaseException | None = None
        """What a callback raised, or a campaign that cannot succeed
        (CANNOT_CAMPAIGN): the node resigned and stopped campaigning."""
        self._first_round: fx.Flag = self._rt.new_flag()
        self._lost = Lost(self._rt.new_flag, None, then=self._demoted)
        self._lost.identify("leader", group)
        self._keeper = Keeper(
            self._rt.new_flag, self._lost, self.ttl - self.margin, self.every, self._renew, f"leadership of {group!r}"
        )
        self._stop: fx.Flag = self._rt.new_flag()
        self._campaigner: fx.Task | None = None
        self._callbacks: fx.Task | None = None
        self._callbacks_lock = threading.Lock()

    def _adopt_worker_id(self, worker_id: str | None) -> None:
        """The node: the one given, else a default naming `worker_id` (a
        Client sets its own here, HandsOut)."""
        self.node = self._given_node or default_owner(worker_id)
        self._rt.label = f"pg_distlock:leader:{self.node}"

    @property
    def is_leader(self) -> bool:
        """True only while this node's term cannot have ended on the server."""
        return bool(self.elected.is_set()) and time.monotonic() < self._keeper.deadline

    def _demoted(self, reason: str) -> fx.Gen[None]:
        self.elected.clear()
        if self.on_demoted is not None:
            yield from self._callback(self.on_demoted, reason)

    def _callback(self, fn: Callable[..., Any], arg: Any) -> fx.Gen[None]:
        """Runs `fn(arg)` on a task of its own, after the callbacks before it."""
        # Spawning never waits, so the lock is never held across a wait.
        with self._callbacks_lock:
            previous = self._callbacks
            self._callbacks = yield fx.Spawn(self._calling(previous, fn, arg))

    def _calling(self, previous: fx.Task | None, fn: Callable[..., Any], arg: Any) -> fx.Gen[None]:
        if previous is not None:
            yield fx.Join(previous)
        try:
            yield fx.Call(fn, (arg,))
        except Exception as exc:
            log.exception("pg_distlock: a callback of the leadership of %r failed; resigning", self.group)
            if self.failure is None:
                self.failure = exc
            self._stop.set()
            yield from self._resign(f"{self.node} resigned the leadership of {self.group!r}: its callback raised {exc!r}")

    def _campaign(self) -> fx.Gen[bool]:
        rows = yield from fx.execute(CAMPAIGN_SQL, (self.group, self.node, interval(self.ttl)))
        is_leader, term, self.leader = rows[0]
        if is_leader:
            if self.term is not None and term != self.term and self.elected.is_set():
                # The term ran out and this node won the next one: to the
                # other nodes that is a new leadership, so it is one here too.
                yield from self._lost.declare(f"the term {self.term} of {self.group!r} ran out", expected=True)
                return False
            self.term = term
        return bool(is_leader)

    def _renew(self) -> fx.Gen[bool]:
        return (yield from self._campaign())

    def _campaigning(self) -> fx.Gen[None]:
        # Its own stop: a later start() makes a new flag, which must not
        # revive this loop if it outlived stop()'s wait for it.
        stop = self._stop
        unavailable = UnavailableLog(self.node, self.group, self.every)
        while not stop.is_set():
            if not self.elected.is_set():
                sent = time.monotonic()
                try:
                    won = yield from self._campaign()
                    unavailable.ended()
                except CANNOT_CAMPAIGN as exc:
                    self._cannot_campaign(exc)
                    return
                except Unavailable as exc:
                    won = False  # the next round runs on a new session (errors.session_must_go)
                    if not stop.is_set():
                        unavailable.failed(exc)
                except Exception as exc:
                    # What can pass: a statement or lock timeout (a DDL holds
                    # leader_state), a deadlock, a serialization failure;
                    # said as rarely as an unavailable server.
                    if not stop.is_set():
                        unavailable.failed(exc)
                    won = False
                finally:
                    self._first_round.set()
                if won and stop.is_set():
                    # Won while stopping (an abandoned start whose campaign
                    # could not be cancelled): left to run out with its TTL,
                    # as a crashed node's. Not resigned: resigning names the
                    # node, not the term, and would end a term a new start
                    # of the same node has won since (review 37).
                    return
                if won:
                    yield from self._keeper.stop()
                    self._lost.reset()
                    # Renewing before anyone hears of the election.
                    yield from self._keeper.start(sent)
                    self.elected.set()
                    self._lost.report("acquired")
                    log.info("pg_distlock: %s leads %r in term %s", self.node, self.group, self.term)
                    if self.on_elected is not None:
                        yield from self._callback(self.on_elected, self.term)
            if (yield fx.Sleep(self.every, stop)):
                return

    def _cannot_campaign(self, exc: Exception) -> None:
        """Campaigning again cannot help: start(), wait_elected() and stop()
        raise `exc` (a leader that cannot lead used to wait forever, its
        error seen only at close())."""
        log.error("pg_distlock: %s cannot campaign for %r: %s", self.node, self.group, exc)
        if self.failure is None:
            self.failure = exc
        self._stop.set()

    def _wait_elected_op(self, timeout: float | None) -> fx.Gen[bool]:
        """Until this node leads (True) or `timeout` seconds pass (False);
        raises what a callback raised."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.failure is not None:
                raise self.failure
            if self.is_leader:
                return True
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            step = 0.1 if left is None else min(left, 0.1)
            if self.elected.is_set():
                yield fx.Sleep(min(step, 0.01))  # elected, but the watchdog has yet to demote
            else:
                # Wakes on election; a failure is seen within a tenth of a second.
                yield fx.Sleep(step, self.elected)

    def _check_installed(self) -> fx.Gen[None]:
        try:
            yield from require_installed()
        except Unavailable as exc:
            if isinstance(exc, Misconfigured):
                raise
            # The campaign retries until the server is back.

    def _start_op(self) -> fx.Gen[None]:
        if self.failure is not None:
            raise self.failure
        yield from self._check_installed()
        self._stop = self._rt.new_flag()
        self._first_round = self._rt.new_flag()
        self._campaigner = yield fx.Spawn(self._campaigning())
        # The first campaign's answer, so that one that cannot succeed is
        # raised here; a server that does not answer is the campaign's to
        # retry.
        yield fx.Sleep(FIRST_CAMPAIGN_WAIT, self._first_round)
        if self.failure is not None:
            raise self.failure

    def _resign(self, reason: str) -> fx.Gen[None]:
        yield from self._keeper.stop()
        was_elected = bool(self.elected.is_set())
        self.elected.clear()
        # Also after a local demotion: the server may still count the term.
        if was_elected or (self.term is not None and time.monotonic() < self._keeper.deadline + 2 * self.margin):
            try:
                yield from fx.execute(RESIGN_SQL, (self.group, self.node))
            except (Unavailable, PermissionDenied):
                pass
        if was_elected:
            yield from self._lost.declare(reason, expected=True)

    def _stop_op(self) -> fx.Gen[None]:
        """Stops campaigning and resigns if leading; raises what a callback raised."""
        self._stop.set()
        if self._campaigner is not None:
            yield fx.Join(self._campaigner, timeout=self.every + 5.0)
            self._campaigner = None
        yield from self._resign(f"{self.node} resigned the leadership of {self.group!r}")
        if self._callbacks is not None:
            yield fx.Join(self._callbacks, timeout=self.every + 5.0)
        if self.failure is not None:
            raise self.failure


class UnavailableLog:
    """Says why campaigns keep failing for a reason that can pass (a server
    that cannot serve them: a standby, a library that needs the server
    restarted after an update; a statement or lock timeout):
    a WARNING at most every UNAVAILABLE_LOG_EVERY seconds while failures
    come, however they alternate with answers, and one line when a campaign
    is answered again after a failure that was reported."""

    def __init__(self, node: str, group: str, every: float) -> None:
        self.node = node
        self.group = group
        self.every = every
        self.since: float | None = None
        self.logged_at: float | None = None
        self.reported = False

    def failed(self, exc: Exception) -> None:
        now = time.monotonic()
        if self.since is None:
            self.since = now
        if self.logged_at is not None and now - self.logged_at < UNAVAILABLE_LOG_EVERY:
            return
        self.logged_at = now
        self.reported = True
        log.warning("pg_distlock: %s's campaigns for %r fail (for %.0f s), trying again every %g s: %s",
                    self.node, self.group, now - self.since, self.every, exc)

    def ended(self) -> None:
        if self.reported:
            log.info("pg_distlock: %s's campaigns for %r are answered again", self.node, self.group)
        self.since = None
        self.reported = False
