"""What every client object shares: the runtime of its flavor (blocking or
asyncio), and for holds, the flag that says they were lost."""

from __future__ import annotations

from typing import Any, Callable, Concatenate, Generic, ParamSpec, TypeVar

from .keeper import Lost, LostCallback
from ..errors import LeaseLost

S = TypeVar("S")


class Bound(Generic[S]):
    """The public classes of pg_distlock and pg_distlock.aio set `_runtime`
    to their driver's Runtime."""

    def __init__(self, source: S) -> None:
        self._rt: Any = self._runtime(source)

    @staticmethod
    def _runtime(source: Any) -> Any:
        raise NotImplementedError


class Losable(Bound[S]):
    lost_error: type[LeaseLost] = LeaseLost

    def __init__(self, source: S, on_lost: LostCallback | None) -> None:
        super().__init__(source)
        self._rt.accept_callable(on_lost, "on_lost")
        self._lost = Lost(self._rt.new_flag, on_lost)

    @property
    def lost(self) -> Any:
        """An Event (threading or asyncio) set the moment the hold is lost:
        stop the work; on_lost(reason) has been called."""
        return self._lost.flag

    @property
    def lost_reason(self) -> str | None:
        return self._lost.reason

    def check(self) -> None:
        """Raises LeaseLost (LockLost for locks) if the hold was lost; call it
        before each step whose result must not be recorded by a stale holder."""
        self._lost.check(self.lost_error)


P = ParamSpec("P")
T = TypeVar("T")


class HandsOut(Generic[P, T]):
    """On a Client, `client.lease(...)` is `Lease(client.pool, ...)`,
    remembered in `client._handed_out` so that client.close() closes it."""

    def __init__(self, cls: Callable[Concatenate[Any, P], T]) -> None:
        self.cls = cls

    def __get__(self, client: Any, owner: type | None = None) -> Callable[P, T]:
        def make(*args: P.args, **kwargs: P.kwargs) -> T:
            made = self.cls(client.pool, *args, **kwargs)
            if hasattr(made, "lock_owner_id"):
                made.lock_owner_id = client.worker_id  # its locks' owner (locks.lock_owner)
            if hasattr(made, "_adopt_worker_id"):
                made._adopt_worker_id(client.worker_id)  # its default lease or leader owner (holds.default_owner)
            client._handed_out.add(made)
            return made

        make.__doc__ = self.cls.__doc__
        return make


def check_pool_size(min_size: int, max_size: int) -> None:
    if min_size < 0 or max_size < max(min_size, 1):
        raise ValueError(f"need 0 <= min_size <= max_size and max_size >= 1, got {min_size} and {max_size}")
