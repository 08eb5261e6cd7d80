"""pg_distlock for asyncio: the same classes as `pg_distlock`, with
coroutines and `async with`. Sources are psycopg.AsyncConnection,
psycopg_pool.AsyncConnectionPool, or a conninfo string; callbacks and
handlers may be plain functions or coroutine functions."""

from __future__ import annotations

import asyncio
import logging
import weakref
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

import psycopg
from psycopg.rows import tuple_row

from ._async import AsyncSource, Runtime, check_source, resign_on_signals, stop_on_signals
from ._sync import connect_kwargs
from ._core import effects as fx
from ._core.base import HandsOut, check_pool_size
from ._core.telemetry import Event as TelemetryEvent, add_hook as add_telemetry_hook
from ._core.admin import AdminLogic, MissedRuns
from ._core.election import LeaderLogic
from ._core.features import Features, detect_op
from ._core.holds import LeaseLogic, SemaphoreLogic
from ._core.keeper import Seconds, non_negative
from ._core.locks import LockLogic
from ._core.loop import Loop, WorkerStats, default_worker_id
from ._core.queue import Job, QueueLogic, completed_in, refuse_outside_transaction, COMPLETE_SQL
from ._core.queue_worker import QueueWorkerLogic
from ._core.ratelimit import RateLimiterLogic, Throttle, bounded_checkout, check_rate_limit_op, throttle_op
from ._core.tasks import TaskClaim, TaskWorkerLogic
from .errors import translate
from .errors import (
    Cancelled, ConnectionLost, Deadlock, DistlockError, Fenced, InvalidArgument, LeaseLost, LockLost, LockTimeout,
    Misconfigured, NotFound, NotHolder, NotInstalled, PermissionDenied, RateLimited, ResourceExhausted, Unavailable,
)

__all__ = [
    "Client", "Admin", "Lock", "lock", "Lease", "Semaphore", "Leader", "TaskWorker", "TaskClaim", "Queue", "QueueWorker", "Job",
    "complete_in_transaction", "RateLimiter", "Throttle", "throttle", "check_rate_limit", "generate_snowflake_id", "features", "Features",
    "WorkerStats", "AsyncSource",
    "DistlockError", "LockTimeout", "Cancelled", "PermissionDenied", "NotHolder", "LeaseLost", "LockLost", "Fenced",
    "RateLimited", "InvalidArgument", "NotFound", "Unavailable", "ConnectionLost", "ResourceExhausted", "Deadlock",
    "NotInstalled", "Misconfigured", "TelemetryEvent", "add_telemetry_hook",
]

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

H = TypeVar("H")


async def _once(source: AsyncSource, op: fx.Gen[H]) -> H:
    rt = Runtime(source)
    try:
        return await rt.run(op)
    finally:
        await rt.close()


HeldT = TypeVar("HeldT", bound="_Held")
RunsT = TypeVar("RunsT", bound="_Runs")


class _Held:
    _rt: Runtime
    _release_op: Callable[[], fx.Gen[bool]]

    async def acquire(self) -> object:
        raise NotImplementedError

    async def release(self) -> bool:
        return bool(await self._rt.run(self._release_op()))

    async def close(self) -> None:
        """Releases the hold if it is held and closes the connection the
        object opened for a conninfo source."""
        try:
            await self.release()  # False, and nothing sent, when not held
        finally:
            await self._rt.close()

    async def __aenter__(self: HeldT) -> HeldT:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


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
        try:
            await self._rt.run(self._start_op())
        except BaseException:
            # Nothing else will stop or close it: `async with` never entered its block.
            await self._abandon_start()
            raise
        if self.handle_signals:
            self._restore_signals = resign_on_signals(self._stop_quietly)

    async def _abandon_start(self) -> None:
        """start() raised (a first campaign that cannot succeed, or start was
        cancelled, as asyncio.wait_for does, while it waited for one): stops
        what it started and closes the connection, so that nothing campaigns
        for an object whose caller saw no start."""
        try:
            self._stop.set()
            campaigner, self._campaigner = self._campaigner, None
            if isinstance(campaigner, asyncio.Future):
                # Its campaign may wait in the server (for a lock of
                # leader_state): psycopg cancels the statement with the task,
                # so it cannot win once the wait is over.
                campaigner.cancel()
                await asyncio.wait({campaigner})
            await self._stop_quietly()
        finally:
            await self._rt.close()

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

    async def close(self) -> None:
        """stop(), then closes the connection opened for a conninfo source."""
        try:
            await self.stop()
        finally:
            await self._rt.close()

    async def __aenter__(self) -> Leader:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Runs:
    _rt: Runtime
    _loop: Loop
    _run_op: Callable[[], fx.Gen[WorkerStats]]

    def stop(self, timeout: Seconds | None = None) -> asyncio.Future[bool]:
        """Asks the worker to stop, from the event loop: it takes no more work
        and an idle wait in the server is cancelled at once. Await the result
        to wait: with `timeout`, up to `timeout` seconds for run() to return,
        after which a handler still running is cancelled (its job failed and
        retried, its claim released as failed) and as long again for the
        worker to record that. True once run() has returned."""
        self._loop.stop()
        wait = None if timeout is None else non_negative(timeout, "timeout")
        return asyncio.ensure_future(self._rt.run(self._loop.stopped(wait)))

    async def run(self) -> WorkerStats:
        with stop_on_signals(self._loop.stop, self._loop.handle_signals):
            try:
                return await self._rt.run(self._run_op())
            finally:
                await self._rt.close()
                self._loop.ended.set()

    async def close(self) -> None:
        """Asks the worker to stop and closes the connection it opened."""
        self.stop()
        await self._rt.close()

    async def __aenter__(self: RunsT) -> RunsT:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class TaskWorker(TaskWorkerLogic[AsyncSource], _Runs):
    _runtime = staticmethod(Runtime)
    _rt: Runtime


class Queue(QueueLogic[AsyncSource]):
    _runtime = staticmethod(Runtime)
    _rt: Runtime

    async def enqueue(
        self, name: str, payload: object = None, *, run_after: datetime | None = None, priority: int = 0,
        max_attempts: int = 5, queue: str | None = None, unique_key: str | None = None, group: str | None = None,
        unique_for: Seconds | None = None,
    ) -> int:
        """Queues a job (payload: anything JSON-serialisable) in `queue`
        (None: the server's default, 'default'); returns its id. With
        `unique_key`, when the queue has an unfinished job with that key,
        queues nothing and returns that job's id; when that job is outside
        a scoped producer's scope, raises DistlockError (23505) instead. A
        scoped producer must name a queue in its scope: 'default' is in none.
        `group` puts the job in a group of its queue (pg_distlock 0.4.0; a
        scoped producer's scope must admit it). `unique_for` (seconds, or a
        timedelta; with `unique_key`, 0.4.0) keeps the key held by a job
        completed within that long: such a job's id is returned too."""
        return await self._rt.run(self._enqueue_op(
            name, payload, run_after=run_after, priority=priority, max_attempts=max_attempts, queue=queue,
            unique_key=unique_key, group=group, unique_for=unique_for,
        ))

    async def enqueue_many(
        self, name: str, payloads: Sequence[object], *, run_after: datetime | None = None, priority: int = 0,
        max_attempts: int = 5, queue: str | None = None, group: str | None = None,
    ) -> list[int]:
        """Queues one job of `name` per payload (None: an empty object) in
        one statement and one commit; returns their ids in the payloads'
        order. Needs pg_distlock 0.3.0 (enqueue_tasks), 0.4.0 for `group`;
        no unique keys."""
        return await self._rt.run(self._enqueue_many_op(
            name, payloads, run_after=run_after, priority=priority, max_attempts=max_attempts, queue=queue,
            group=group,
        ))

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

    async def __aenter__(self) -> Queue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class Admin(AdminLogic[AsyncSource]):
    """pg_distlock.Admin for asyncio."""

    _runtime = staticmethod(Runtime)
    _rt: Runtime

    async def pause_queue(self, queue: str) -> bool:
        return await self._rt.run(self._pause_op(queue))

    async def resume_queue(self, queue: str) -> bool:
        return await self._rt.run(self._resume_op(queue))

    async def set_queue_limit(self, queue: str, max_processing: int | None) -> None:
        await self._rt.run(self._set_limit_op(queue, max_processing))

    async def retry_dead(self, queue: str | None = None, ids: Sequence[int] | None = None) -> int:
        return await self._rt.run(self._jobs_op("retry_dead", queue, ids))

    async def delete_dead(self, queue: str | None = None, ids: Sequence[int] | None = None) -> int:
        return await self._rt.run(self._jobs_op("delete_dead", queue, ids))

    async def requeue(self, queue: str | None = None, ids: Sequence[int] | None = None) -> int:
        return await self._rt.run(self._jobs_op("requeue", queue, ids))

    async def release_lease(self, name: str) -> bool:
        return await self._rt.run(self._release_lease_op(name))

    async def run_task_now(self, task_id: int) -> bool:
        return await self._rt.run(self._run_task_now_op(task_id))

    async def define_task(
        self, name: str, task_type: str, schedule: str | None = None, *, timezone: str | None = None,
        missed_runs: MissedRuns = "once", missed_runs_grace: Seconds | None = None,
        missed_runs_max: int | None = None, enabled: bool | None = None,
    ) -> int:
        return await self._rt.run(self._define_task_op(
            name, task_type, schedule, timezone, missed_runs, missed_runs_grace, missed_runs_max, enabled,
        ))

    async def close(self) -> None:
        await self._rt.close()

    async def __aenter__(self) -> Admin:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class QueueWorker(QueueWorkerLogic[AsyncSource], _Runs):
    """Awaits handler(job) for each job, up to `concurrency` at once (each in
    a task of its own); see pg_distlock.QueueWorker."""

    _queue = staticmethod(Queue)


async def complete_in_transaction(conn: psycopg.AsyncConnection[Any], job: Job) -> None:
    """Completes `job` inside the transaction open on `conn`: see
    pg_distlock.complete_in_transaction."""
    refuse_outside_transaction(conn.autocommit, conn.info.transaction_status)
    try:
        # The caller's connection: its own row factory may make dicts.
        cur = await conn.cursor(row_factory=tuple_row).execute(COMPLETE_SQL, (job.id, job.worker_id, job.attempts))
        completed = await cur.fetchone()
    except psycopg.Error as exc:
        raise translate(exc) from exc
    completed_in(job, completed and completed[0])


class RateLimiter(RateLimiterLogic[AsyncSource]):
    _runtime = staticmethod(Runtime)
    _rt: Runtime

    async def try_acquire(self, quantity: int = 1, timeout: Seconds | None = None) -> Throttle:
        """One try, answered at once; `timeout` bounds getting a connection
        (None: the pool's own timeout)."""
        return await self._rt.run(self._try_acquire_op(quantity, bounded_checkout(timeout)))

    async def acquire(self, quantity: int = 1, timeout: Seconds | None = None) -> Throttle:
        return await self._rt.run(self._acquire_op(quantity, timeout))

    async def close(self) -> None:
        await self._rt.close()

    async def __aenter__(self) -> RateLimiter:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def throttle(
    source: AsyncSource, key: str, max_burst: int, count_per_period: int, period: Seconds, quantity: int = 1,
    timeout: Seconds | None = None,
) -> Throttle:
    """One GCRA decision; `timeout` bounds getting a connection (None: the
    pool's own timeout)."""
    return await _once(source, throttle_op(key, max_burst, count_per_period, period, quantity,
                                           bounded_checkout(timeout)))


async def check_rate_limit(source: AsyncSource, key: str, max_requests: int, window_seconds: int) -> bool:
    return await _once(source, check_rate_limit_op(key, max_requests, window_seconds))


async def generate_snowflake_id(source: AsyncSource, worker_id: int) -> int:
    return int(await _once(source, fx.first("SELECT distlock.generate_snowflake_id(%s)", (worker_id,))))


async def features(source: AsyncSource) -> Features:
    return await _once(source, detect_op())


class Client:
    """pg_distlock.Client for asyncio, over a psycopg_pool.AsyncConnectionPool:
    `async with aio.Client(conninfo) as client:` (or `await client.open()`)."""

    lock = HandsOut(Lock)
    lease = HandsOut(Lease)
    semaphore = HandsOut(Semaphore)
    leader = HandsOut(Leader)
    queue = HandsOut(Queue)
    queue_worker = HandsOut(QueueWorker)
    task_worker = HandsOut(TaskWorker)
    rate_limiter = HandsOut(RateLimiter)
    admin = HandsOut(Admin)

    def __init__(
        self, source: str | AsyncConnectionPool[Any], *, min_size: int = 1, max_size: int = 10,
        worker_id: str | None = None,
    ) -> None:
        from psycopg_pool import AsyncConnectionPool

        self.worker_id = worker_id or default_worker_id()
        self._owns_pool = isinstance(source, str)
        if isinstance(source, str):
            check_pool_size(min_size, max_size)
            self.pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
                source, min_size=min_size, max_size=max_size, open=False, name=f"pg_distlock:{self.worker_id}",
                kwargs=connect_kwargs(source, f"pg_distlock:client:{self.worker_id}"),
            )
        else:
            self.pool = source
        self._handed_out: weakref.WeakSet[Any] = weakref.WeakSet()

    async def open(self) -> None:
        """Opens the pool the client made (a no-op for a pool it was given),
        after one connection of its own: Misconfigured or NotInstalled here
        rather than after the pool's timeout from the first call."""
        if self._owns_pool:
            assert isinstance(self.pool.conninfo, str)
            await check_source(self.pool.conninfo, f"pg_distlock:client:{self.worker_id}")
            await self.pool.open()

    async def throttle(
        self, key: str, max_burst: int, count_per_period: int, period: Seconds, quantity: int = 1,
        timeout: Seconds | None = None,
    ) -> Throttle:
        return await throttle(self.pool, key, max_burst, count_per_period, period, quantity, timeout)

    async def check_rate_limit(self, key: str, max_requests: int, window_seconds: int) -> bool:
        return await check_rate_limit(self.pool, key, max_requests, window_seconds)

    async def generate_snowflake_id(self, worker_id: int) -> int:
        return await generate_snowflake_id(self.pool, worker_id)

    async def features(self) -> Features:
        return await features(self.pool)

    async def close(self) -> None:
        """Closes what the client handed out, then the pool it opened."""
        try:
            for made in list(self._handed_out):
                try:
                    await made.close()
                except Exception:
                    logging.getLogger("pg_distlock").exception("pg_distlock: closing %r failed", made)
        finally:
            if self._owns_pool:
                await self.pool.close()

    async def __aenter__(self) -> Client:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
