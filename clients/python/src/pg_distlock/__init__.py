"""pg_distlock for Python: the blocking API. `pg_distlock.aio` has the same
classes for asyncio.

Every class takes a source: a psycopg connection, a psycopg_pool pool, or a
conninfo string (the client then opens its own autocommit connections and
reopens them after a failure).
"""

from __future__ import annotations

import logging
import weakref
from datetime import datetime
from typing import TYPE_CHECKING, Any, Callable, Sequence, TypeVar

import psycopg
from psycopg.rows import tuple_row

from . import snowflake
from ._core.base import HandsOut, check_pool_size
from ._core.telemetry import Event as TelemetryEvent, add_hook as add_telemetry_hook
from ._core.admin import AdminLogic, MissedRuns
from ._core.election import LeaderLogic
from ._core.features import Features, detect_op
from ._core.holds import LeaseLogic, SemaphoreLogic
from ._core.locks import LockLogic
from ._core.loop import Loop, WorkerStats, default_worker_id
from ._core.queue import Job, QueueLogic, completed_in, refuse_outside_transaction, COMPLETE_SQL
from ._core.queue_worker import QueueWorkerLogic
from ._core.ratelimit import RateLimiterLogic, Throttle, bounded_checkout, check_rate_limit_op, throttle_op
from ._core.tasks import TaskClaim, TaskWorkerLogic
from ._core import effects as fx
from ._core.keeper import Seconds, non_negative
from ._sync import Runtime, Source, check_source, connect_kwargs, resign_on_signals, stop_on_signals
from .errors import translate
from .errors import (
    Cancelled, ConnectionLost, Deadlock, DistlockError, NotInstalled, Fenced, InvalidArgument, LeaseLost, LockLost, LockTimeout,
    Misconfigured, NotFound, NotHolder, PermissionDenied, RateLimited, ResourceExhausted, Unavailable,
)

__all__ = [
    "Client", "Admin", "Lock", "lock", "Lease", "Semaphore", "Leader", "TaskWorker", "TaskClaim", "Queue", "QueueWorker", "Job",
    "complete_in_transaction", "RateLimiter", "Throttle", "throttle", "check_rate_limit", "generate_snowflake_id", "snowflake", "features",
    "Features", "WorkerStats", "Source",
    "DistlockError", "LockTimeout", "Cancelled", "PermissionDenied", "NotHolder", "LeaseLost", "LockLost", "Fenced",
    "RateLimited", "InvalidArgument", "NotFound", "Unavailable", "ConnectionLost", "ResourceExhausted", "Deadlock",
    "NotInstalled", "Misconfigured", "TelemetryEvent", "add_telemetry_hook",
]

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

H = TypeVar("H")


def _once(source: Source, op: fx.Gen[H]) -> H:
    rt = Runtime(source)
    try:
        return rt.run(op)
    finally:
        rt.close()


HeldT = TypeVar("HeldT", bound="_Held")
RunsT = TypeVar("RunsT", bound="_Runs")


class _Held:
    """Lock, Lease and Semaphore as context managers."""

    _rt: Runtime
    _release_op: Callable[[], fx.Gen[bool]]

    def acquire(self) -> object:
        raise NotImplementedError

    def release(self) -> bool:
        """Gives the hold back; False when it had been lost meanwhile."""
        return self._rt.run(self._release_op())

    def close(self) -> None:
        """Releases the hold if it is held and closes the connection the
        object opened for a conninfo source."""
        try:
            self.release()  # False, and nothing sent, when not held
        finally:
            self._rt.close()

    def __enter__(self: HeldT) -> HeldT:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Lock(LockLogic[Source], _Held):
    """distlock.lock as a context manager: LockTimeout when not granted in
    time; `lost` is set (and on_lost called) when the holding connection dies."""

    _runtime = staticmethod(Runtime)
    _rt: Runtime

    def acquire(self) -> None:
        self._rt.run(self._acquire_op())


lock = Lock


class Lease(LeaseLogic[Source], _Held):
    """A lease renewed in the background at ttl/3; `token` fences writes,
    `lost` is set the moment it is lost."""

    _runtime = staticmethod(Runtime)
    _rt: Runtime

    def acquire(self) -> int:
        return int(self._rt.run(self._acquire_op()))


class Semaphore(SemaphoreLogic[Source], _Held):
    """One of `max` places, renewed in the background like a Lease."""

    _runtime = staticmethod(Runtime)
    _rt: Runtime

    def acquire(self) -> None:
        self._rt.run(self._acquire_op())


class Leader(LeaderLogic[Source]):
    """Campaigns in the background while entered. `is_leader` is true only
    while the term cannot have ended on the server. on_elected(term) and
    on_demoted(reason) run in a thread of their own, in order, never holding
    up renewal; if one raises, the node resigns, stops campaigning, and
    wait_elected() and stop() raise it. With handle_signals=True, SIGTERM and
    SIGINT make the node resign first and then act as they did before."""

    _runtime = staticmethod(Runtime)
    _rt: Runtime
    _restore_signals: Callable[[], None] | None = None

    def start(self) -> None:
        try:
            self._rt.run(self._start_op())
        except BaseException:
            # Nothing else will stop or close it: `with` never entered its block.
            self._abandon_start()
            raise
        if self.handle_signals:
            self._restore_signals = resign_on_signals(self._stop_quietly)

    def _abandon_start(self) -> None:
        """start() raised (a first campaign that cannot succeed, Ctrl-C while
        it waited for one): stops what it started and closes the connection,
        so that nothing campaigns for an object whose caller saw no start."""
        try:
            self._stop.set()
            # The first campaign may wait in the server (for a lock of
            # leader_state): ended there, it cannot win once the wait is over.
            self._rt.cancel_statements()
            self._stop_quietly()
        finally:
            self._rt.close()

    def _stop_quietly(self) -> None:
        try:
            self._rt.run(self._stop_op())
        except Exception:
            pass  # logged where it happened; the signal's own action follows

    def stop(self) -> None:
        if self._restore_signals is not None:
            self._restore_signals()
            self._restore_signals = None
        self._rt.run(self._stop_op())

    def wait_elected(self, timeout: float | None = None) -> bool:
        """Waits until this node leads (True) or `timeout` seconds pass
        (False); raises what a callback raised."""
        return bool(self._rt.run(self._wait_elected_op(timeout)))

    def close(self) -> None:
        """stop(), then closes the connection opened for a conninfo source."""
        try:
            self.stop()
        finally:
            self._rt.close()

    def __enter__(self) -> Leader:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Runs:
    """TaskWorker and QueueWorker: run() until idle (exit_when_idle), stop(),
    SIGTERM or SIGINT; the task at hand is finished first."""

    _rt: Runtime
    _loop: Loop
    _run_op: Callable[[], fx.Gen[WorkerStats]]

    def stop(self, timeout: Seconds | None = None) -> bool:
        """Asks the worker to stop, from any thread: it takes no more work and
        an idle wait in the server is cancelled. Without `timeout` it returns
        at once. With one, it waits up to `timeout` seconds for run() to
        return; a handler still running then has its job's or claim's
        `cancelled` event set (raise to give up: the job is failed and
        retried, the claim released as failed), and stop waits as long again.
        True once run() has returned."""
        self._loop.stop()
        wait = None if timeout is None else non_negative(timeout, "timeout")
        return self._rt.run(self._loop.stopped(wait))

    def run(self) -> WorkerStats:
        with stop_on_signals(self._loop.stop, self._loop.handle_signals):
            try:
                return self._rt.run(self._run_op())
            finally:
                self._rt.close()
                self._loop.ended.set()

    def close(self) -> None:
        """Asks the worker to stop and closes the connection it opened."""
        self.stop()
        self._rt.close()

    def __enter__(self: RunsT) -> RunsT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TaskWorker(TaskWorkerLogic[Source], _Runs):
    """Runs handler(claim) for each due scheduled task with its fencing token."""

    _runtime = staticmethod(Runtime)
    _rt: Runtime


class Queue(QueueLogic[Source]):
    _runtime = staticmethod(Runtime)
    _rt: Runtime

    def enqueue(
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
        return self._rt.run(self._enqueue_op(
            name, payload, run_after=run_after, priority=priority, max_attempts=max_attempts, queue=queue,
            unique_key=unique_key, group=group, unique_for=unique_for,
        ))

    def enqueue_many(
        self, name: str, payloads: Sequence[object], *, run_after: datetime | None = None, priority: int = 0,
        max_attempts: int = 5, queue: str | None = None, group: str | None = None,
    ) -> list[int]:
        """Queues one job of `name` per payload (None: an empty object) in
        one statement and one commit; returns their ids in the payloads'
        order. Needs pg_distlock 0.3.0 (enqueue_tasks), 0.4.0 for `group`;
        no unique keys."""
        return self._rt.run(self._enqueue_many_op(
            name, payloads, run_after=run_after, priority=priority, max_attempts=max_attempts, queue=queue,
            group=group,
        ))

    def consume(self, batch: int = 1, wait: Seconds = 0.0) -> list[Job]:
        return self._rt.run(self._consume_op(batch, wait))

    def complete(self, job: Job) -> bool:
        return self._rt.run(self._complete_op(job))

    def complete_many(self, jobs: list[Job]) -> set[int]:
        return self._rt.run(self._complete_many_op(jobs))

    def fail(self, job: Job, error: str | None = None) -> bool:
        return self._rt.run(self._fail_op(job, error))

    def extend(self, job: Job, lease: Seconds | None = None) -> bool:
        return self._rt.run(self._extend_op(job, lease))

    def close(self) -> None:
        self._rt.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Admin(AdminLogic[Source]):
    """The admin calls, for a role with the admin capability (which is never
    scoped: an admin acts on every queue, job, lease and task):
    `PermissionDenied` otherwise. Each runs one server function
    (docs/queue.md, docs/leases.md)."""

    _runtime = staticmethod(Runtime)
    _rt: Runtime

    def pause_queue(self, queue: str) -> bool:
        """Consumers take no job of `queue` until resumed; False if it was paused."""
        return self._rt.run(self._pause_op(queue))

    def resume_queue(self, queue: str) -> bool:
        """Undoes pause_queue (waiting consumers are woken); False if it was not paused."""
        return self._rt.run(self._resume_op(queue))

    def set_queue_limit(self, queue: str, max_processing: int | None) -> None:
        """At most `max_processing` jobs of `queue` processing at once, across all consumers; None removes it."""
        self._rt.run(self._set_limit_op(queue, max_processing))

    def retry_dead(self, queue: str | None = None, ids: Sequence[int] | None = None) -> int:
        """Gives the dead jobs of `queue`, or among `ids`, or all, one more attempt; how many."""
        return self._rt.run(self._jobs_op("retry_dead", queue, ids))

    def delete_dead(self, queue: str | None = None, ids: Sequence[int] | None = None) -> int:
        """Deletes the dead jobs of `queue`, or among `ids`, or all; how many."""
        return self._rt.run(self._jobs_op("delete_dead", queue, ids))

    def requeue(self, queue: str | None = None, ids: Sequence[int] | None = None) -> int:
        """Takes the processing jobs of `queue`, or among `ids`, or all, back from their consumers
        (their settles are refused) and queues them again; how many."""
        return self._rt.run(self._jobs_op("requeue", queue, ids))

    def release_lease(self, name: str) -> bool:
        """Force-releases lease `name`: its holder's token stops working; False if none was held."""
        return self._rt.run(self._release_lease_op(name))

    def run_task_now(self, task_id: int) -> bool:
        """Makes scheduled task `task_id` due now without changing its schedule (pg_distlock 0.4.0);
        False when a claim runs it or it is due already. NotFound for an unknown task, DistlockError
        (55000) for a disabled one."""
        return self._rt.run(self._run_task_now_op(task_id))

    def define_task(
        self, name: str, task_type: str, schedule: str | None = None, *, timezone: str | None = None,
        missed_runs: MissedRuns = "once", missed_runs_grace: Seconds | None = None,
        missed_runs_max: int | None = None, enabled: bool | None = None,
    ) -> int:
        """Creates scheduled task `name`, or redefines the one of that name; its id (pg_distlock 0.4.0).
        `schedule` is a cron expression or `every N seconds|minutes`, on the wall clock of `timezone`
        (None: the server's distlock.timezone); `missed_runs` says what a fetch does with slots
        missed while no worker claimed them ("once", "skip" older than `missed_runs_grace`, "all",
        at most the newest `missed_runs_max`); docs/tasks.md. `enabled` None: a new task is enabled,
        a redefined one keeps its state (an application that defines its tasks at every start does
        not undo an operator's disable). InvalidArgument for a value the server refuses (an unknown
        zone, a bad expression, "skip" without a grace)."""
        return self._rt.run(self._define_task_op(
            name, task_type, schedule, timezone, missed_runs, missed_runs_grace, missed_runs_max, enabled,
        ))

    def close(self) -> None:
        self._rt.close()

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class QueueWorker(QueueWorkerLogic[Source], _Runs):
    """Runs handler(job) for each job, up to `concurrency` at once (each in
    a thread of its own); completed on return, failed with the error text
    on an exception. It claims as many jobs as it has free handlers, plus
    up to `prefetch` more held ahead (`batch`, if larger, is the most it
    holds); finished jobs are settled by the call that claims the next
    ones, or `flush_interval` after they finish while the worker waits for
    work."""

    _queue = staticmethod(Queue)


def complete_in_transaction(conn: psycopg.Connection[Any], job: Job) -> None:
    """Completes `job` inside the transaction open on `conn`, so that the
    job is completed if and only if the handler's own writes commit. Raises
    LeaseLost, leaving the transaction to be rolled back, when the attempt is
    no longer the worker's; QueueWorker then does not settle the job."""
    refuse_outside_transaction(conn.autocommit, conn.info.transaction_status)
    try:
        # The caller's connection: its own row factory may make dicts.
        cur = conn.cursor(row_factory=tuple_row)
        completed = cur.execute(COMPLETE_SQL, (job.id, job.worker_id, job.attempts)).fetchone()
    except psycopg.Error as exc:
        raise translate(exc) from exc
    completed_in(job, completed and completed[0])


class RateLimiter(RateLimiterLogic[Source]):
    _runtime = staticmethod(Runtime)
    _rt: Runtime

    def try_acquire(self, quantity: int = 1, timeout: Seconds | None = None) -> Throttle:
        """One try, answered at once; `timeout` bounds getting a connection
        (None: the pool's own timeout)."""
        return self._rt.run(self._try_acquire_op(quantity, bounded_checkout(timeout)))

    def acquire(self, quantity: int = 1, timeout: Seconds | None = None) -> Throttle:
        return self._rt.run(self._acquire_op(quantity, timeout))

    def close(self) -> None:
        self._rt.close()

    def __enter__(self) -> RateLimiter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def throttle(
    source: Source, key: str, max_burst: int, count_per_period: int, period: Seconds, quantity: int = 1,
    timeout: Seconds | None = None,
) -> Throttle:
    """One GCRA decision; `timeout` bounds getting a connection (None: the
    pool's own timeout)."""
    return _once(source, throttle_op(key, max_burst, count_per_period, period, quantity, bounded_checkout(timeout)))


def check_rate_limit(source: Source, key: str, max_requests: int, window_seconds: int) -> bool:
    return _once(source, check_rate_limit_op(key, max_requests, window_seconds))


def generate_snowflake_id(source: Source, worker_id: int) -> int:
    return int(_once(source, fx.first("SELECT distlock.generate_snowflake_id(%s)", (worker_id,))))


def features(source: Source) -> Features:
    """Which optional server functions the connected pg_distlock offers."""
    return _once(source, detect_op())


class Client:
    """One object for an application: owns a connection pool (or uses the
    psycopg_pool.ConnectionPool it is given) and hands out every primitive
    over it, so a process keeps at most the pool's connections however many
    locks, leases or workers it makes. Pooled connections are named
    `pg_distlock:client:<worker_id>` unless the conninfo names them.
    close(), or leaving `with`, closes everything it handed out (holds are
    released, leaders resign, workers are asked to stop) and then the pool
    it opened."""

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
        self, source: str | ConnectionPool[Any], *, min_size: int = 1, max_size: int = 10, worker_id: str | None = None
    ) -> None:
        from psycopg_pool import ConnectionPool

        self.worker_id = worker_id or default_worker_id()
        self._owns_pool = isinstance(source, str)
        if isinstance(source, str):
            check_pool_size(min_size, max_size)
            check_source(source, f"pg_distlock:client:{self.worker_id}")
            self.pool: ConnectionPool[Any] = ConnectionPool(
                source, min_size=min_size, max_size=max_size, open=True, name=f"pg_distlock:{self.worker_id}",
                kwargs=connect_kwargs(source, f"pg_distlock:client:{self.worker_id}"),
            )
        else:
            self.pool = source
        self._handed_out: weakref.WeakSet[Any] = weakref.WeakSet()

    def throttle(
        self, key: str, max_burst: int, count_per_period: int, period: Seconds, quantity: int = 1,
        timeout: Seconds | None = None,
    ) -> Throttle:
        return throttle(self.pool, key, max_burst, count_per_period, period, quantity, timeout)

    def check_rate_limit(self, key: str, max_requests: int, window_seconds: int) -> bool:
        return check_rate_limit(self.pool, key, max_requests, window_seconds)

    def generate_snowflake_id(self, worker_id: int) -> int:
        return generate_snowflake_id(self.pool, worker_id)

    def features(self) -> Features:
        return features(self.pool)

    def close(self) -> None:
        """Closes what the client handed out, then the pool it opened."""
        try:
            for made in list(self._handed_out):
                try:
                    made.close()
                except Exception:
                    logging.getLogger("pg_distlock").exception("pg_distlock: closing %r failed", made)
        finally:
            if self._owns_pool:
                self.pool.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
