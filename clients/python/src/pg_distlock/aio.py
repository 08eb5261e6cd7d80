"""pg_distlock for asyncio: the same classes as `pg_distlock`, with
coroutines and `async with`. Sources are psycopg.AsyncConnection,
psycopg_pool.AsyncConnectionPool, or a conninfo string; callbacks and
handlers may be plain functions or coroutine functions."""

from __future__ import annotations

from datetime import datetime
from typing import Callable, TypeVar

from ._async import AsyncSource, Runtime, resign_on_signals, stop_on_signals
from ._core import effects as fx
from ._core.election import LeaderLogic
from ._core.features import Features, detect_op
from ._core.holds import LeaseLogic, SemaphoreLogic
from ._core.keeper import Seconds
from ._core.locks import LockLogic
from ._core.loop import Loop, WorkerStats
from ._core.queue import Job, QueueLogic, QueueWorkerLogic
from ._core.ratelimit import RateLimiterLogic, Throttle, check_rate_limit_op, throttle_op
from ._core.tasks import TaskClaim, TaskWorkerLogic
from .errors import (
    ConnectionLost, Deadlock, DistlockError, Fenced, InvalidArgument, LeaseLost, LockLost, LockTimeout,
    NotFound, NotHolder, NotInstalled, PermissionDenied, RateLimited, ResourceExhausted, Unavailable,
)

__all__ = [
    "Lock", "lock", "Lease", "Semaphore", "Leader", "TaskWorker", "TaskClaim", "Queue", "QueueWorker", "Job",
    "RateLimiter", "Throttle", "throttle", "check_rate_limit", "generate_snowflake_id", "features", "Features",
    "WorkerStats", "AsyncSource",
    "DistlockError", "LockTimeout", "PermissionDenied", "NotHolder", "LeaseLost", "LockLost", "Fenced",
    "RateLimited", "InvalidArgument", "NotFound", "Unavailable", "ConnectionLost", "ResourceExhausted", "Deadlock",
    "NotInstalled",
]

H = TypeVar("H")


async def _once(source: AsyncSource, op: fx.Gen[H]) -> H:
    rt = Runtime(source)
    try:
        return await rt.run(op)
    finally:
        await rt.close()


HeldT = TypeVar("HeldT", bound="_Held")


class _Held:
    _rt: Runtime
    _release_op: Callable[[], fx.Gen[bool]]

    async def acquire(self) -> object:
        raise NotImplementedError

    async def release(self) -> bool:
        return bool(await self._rt.run(self._release_op()))

    async def __aenter__(self: HeldT) -> HeldT:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()


class Lock(LockLogic[AsyncSource], _Held):
    _runtime = staticmethod(Runtime)
    _rt: Runtime

    async def acquire(self) -> None:
        await self._rt.run(self._acquire_op())


lock = Lock


class Lease(LeaseLogic[AsyncSource], _Held):
    _runtime = staticmethod(Runtime)
    _rt: Runtime

    async def acquire(self) -> int:
        return int(await self._rt.run(self._acquire_op()))


class Semaphore(SemaphoreLogic[AsyncSource], _Held):
    _runtime = staticmethod(Runtime)
    _rt: Runtime

    async def acquire(self) -> None:
        await self._rt.run(self._acquire_op())


class Leader(LeaderLogic[AsyncSource]):
    """pg_distlock.Leader for asyncio: callbacks run in a task of their own.
    With handle_signals=True, SIGTERM and SIGINT make the node resign first
    and then act as they did before."""

    _runtime = staticmethod(Runtime)
    _rt: Runtime
    _restore_signals: Callable[[], None] | None = None

    async def start(self) -> None:
        await self._rt.run(self._start_op())
        if self.handle_signals:
            self._restore_signals = resign_on_signals(self._stop_quietly)

    async def _stop_quietly(self) -> None:
        try:
            await self._rt.run(self._stop_op())
        except Exception:
            pass  # logged where it happened; the signal's own action follows

    async def stop(self) -> None:
        if self._restore_signals is not None:
            self._restore_signals()
            self._restore_signals = None
        await self._rt.run(self._stop_op())

    async def wait_elected(self, timeout: float | None = None) -> bool:
        """Waits until this node leads (True) or `timeout` seconds pass
        (False); raises what a callback raised."""
        return bool(await self._rt.run(self._wait_elected_op(timeout)))

    async def __aenter__(self) -> Leader:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


class _Runs:
    _rt: Runtime
    _loop: Loop
    _run_op: Callable[[], fx.Gen[WorkerStats]]
    stop: Callable[[], None]

    async def run(self) -> WorkerStats:
        with stop_on_signals(self.stop, self._loop.handle_signals):
            try:
                return await self._rt.run(self._run_op())
            finally:
                await self._rt.close()


class TaskWorker(TaskWorkerLogic[AsyncSource], _Runs):
    _runtime = staticmethod(Runtime)
    _rt: Runtime


class Queue(QueueLogic[AsyncSource]):
    _runtime = staticmethod(Runtime)
    _rt: Runtime

    async def enqueue(
        self, name: str, payload: object = None, *, run_after: datetime | None = None, priority: int = 0,
        max_attempts: int = 5,
    ) -> int:
        """Queues a job (payload: anything JSON-serialisable); returns its id."""
        return await self._rt.run(self._enqueue_op(name, payload, run_after=run_after, priority=priority, max_attempts=max_attempts))

    async def consume(self, batch: int = 1, wait: Seconds = 0.0) -> list[Job]:
        return await self._rt.run(self._consume_op(batch, wait))

    async def complete(self, job: Job) -> bool:
        return bool(await self._rt.run(self._complete_op(job)))

    async def complete_many(self, jobs: list[Job]) -> set[int]:
        return await self._rt.run(self._complete_many_op(jobs))

    async def fail(self, job: Job, error: str | None = None) -> bool:
        return bool(await self._rt.run(self._fail_op(job, error)))

    async def extend(self, job: Job, lease: Seconds | None = None) -> bool:
        return bool(await self._rt.run(self._extend_op(job, lease)))

    async def close(self) -> None:
        await self._rt.close()


class QueueWorker(QueueWorkerLogic[AsyncSource], _Runs):
    _queue = staticmethod(Queue)


class RateLimiter(RateLimiterLogic[AsyncSource]):
    _runtime = staticmethod(Runtime)
    _rt: Runtime

    async def try_acquire(self, quantity: int = 1) -> Throttle:
        return await self._rt.run(self._try_acquire_op(quantity))

    async def acquire(self, quantity: int = 1, timeout: Seconds | None = None) -> Throttle:
        return await self._rt.run(self._acquire_op(quantity, timeout))


async def throttle(
    source: AsyncSource, key: str, max_burst: int, count_per_period: int, period: Seconds, quantity: int = 1
) -> Throttle:
    return await _once(source, throttle_op(key, max_burst, count_per_period, period, quantity))


async def check_rate_limit(source: AsyncSource, key: str, max_requests: int, window_seconds: int) -> bool:
    return await _once(source, check_rate_limit_op(key, max_requests, window_seconds))


async def generate_snowflake_id(source: AsyncSource, worker_id: int) -> int:
    return int(await _once(source, fx.first("SELECT distlock.generate_snowflake_id(%s)", (worker_id,))))


async def features(source: AsyncSource) -> Features:
    return await _once(source, detect_op())
