"""Leader election: campaign every TTL/3, and while elected keep the
leadership with the same renewer and watchdog as a lease, so a leader that
cannot confirm its term within the TTL steps down locally before another
node can be elected."""

from __future__ import annotations

import time
from typing import Any, Callable, TypeVar

from . import effects as fx
from .base import Bound
from .holds import default_owner
from .keeper import Keeper, Lost, Seconds, interval, seconds
from ..errors import Unavailable

S = TypeVar("S")

CAMPAIGN_SQL = "SELECT is_leader, term, leader FROM distlock.try_become_leader(%s, %s, %s)"


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
    ) -> None:
        super().__init__(source)
        self.group = group
        self.node = node or default_owner()
        self.ttl = seconds(ttl)
        self.every = seconds(campaign_every) if campaign_every is not None else self.ttl / 3
        self.on_elected = on_elected
        self.on_demoted = on_demoted
        self.elected: Any = self._rt.new_flag()
        """An Event set while this node is the leader."""
        self.term: int | None = None
        self.leader: str | None = None
        """The node the server last named as leader."""
        self._lost = Lost(self._rt.new_flag, self._demoted)
        self._keeper = Keeper(self._rt.new_flag, self._lost, self.ttl, self.every, self._renew, f"leadership of {group!r}")
        self._stop: fx.Flag = self._rt.new_flag()
        self._campaigner: fx.Task | None = None

    @property
    def is_leader(self) -> bool:
        return bool(self.elected.is_set())

    def _demoted(self, reason: str) -> Any:
        self.elected.clear()
        return self.on_demoted(reason) if self.on_demoted else None

    def _campaign(self) -> fx.Gen[bool]:
        rows = yield from fx.execute(CAMPAIGN_SQL, (self.group, self.node, interval(self.ttl)))
        is_leader, term, self.leader = rows[0]
        if is_leader:
            self.term = term
        return bool(is_leader)

    def _renew(self) -> fx.Gen[bool]:
        return (yield from self._campaign())

    def _campaigning(self) -> fx.Gen[None]:
        while not self._stop.is_set():
            if not self.elected.is_set():
                sent = time.monotonic()
                try:
                    won = yield from self._campaign()
                except Unavailable:
                    won = False
                if won:
                    yield from self._keeper.stop()
                    self._lost.reset()
                    self.elected.set()
                    if self.on_elected is not None:
                        yield fx.Call(self.on_elected, (self.term,))
                    yield from self._keeper.start(sent)
            if (yield fx.Sleep(self.every, self._stop)):
                return

    def _start_op(self) -> fx.Gen[None]:
        self._stop = self._rt.new_flag()
        self._campaigner = yield fx.Spawn(self._campaigning())

    def _stop_op(self) -> fx.Gen[None]:
        """Stops campaigning and resigns if leading."""
        self._stop.set()
        if self._campaigner is not None:
            yield fx.Join(self._campaigner, timeout=self.every + 5.0)
            self._campaigner = None
        yield from self._keeper.stop()
        if self.elected.is_set():
            try:
                yield from fx.execute("SELECT distlock.resign_leader(%s, %s)", (self.group, self.node))
            except Unavailable:
                pass
            yield from self._lost.declare(f"{self.node} resigned the leadership of {self.group!r}", expected=True)
