"""The job queue: enqueue, consume (waiting in the server when it can),
settle by attempt (queue_worker.py has the consumer loop).

Settling always names the attempt, so a consumer whose lease ran out cannot
complete the attempt another consumer took over.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping, Sequence, TypeVar

from psycopg.pq import TransactionStatus
from psycopg.types.json import Jsonb

from . import effects as fx
from .base import Bound
from .features import Features, needs_update
from .holds import holder_token
from .keeper import MIN_CONNECT_WAIT, Seconds, at_least, interval, non_negative, positive, seconds
from ..errors import Cancelled, InvalidArgument, LeaseLost

S = TypeVar("S")


@dataclass
class Job:
    id: int
    name: str
    payload: Any
    attempts: int
    max_attempts: int
    lease_expires_at: datetime
    priority: int
    worker_id: str
    queue: str | None = None
    """The queue the job came from: from the server on pg_distlock 0.4.0;
    before, the queue the consumer named when it named exactly one, else None."""
    group: str | None = None
    """The job's group (``enqueue(..., group=)``), None for a job without
    one and from a server before pg_distlock 0.4.0."""
    lost: Any = field(default=None, repr=False)
    """In QueueWorker: an Event set when the job's lease could not be extended."""
    cancelled: Any = field(default=None, repr=False)
    """In QueueWorker: an Event set when stop(timeout) ran out: give up by
    raising; the job is failed and retried."""
    completed_in_transaction: bool = field(default=False, repr=False)
    """Set by complete_in_transaction(): the handler's own commit settles
    the job, and QueueWorker does not settle it again."""


COMPLETE_SQL = "SELECT distlock.complete_task(%s, %s, %s)"


# The longest unique_for the server takes (a century of 365.25-day years: enqueue.rs).
LONGEST_UNIQUE_FOR = timedelta(days=36_525)


def unique_window(value: Seconds) -> timedelta:
    """`unique_for` as the server's interval: a number of seconds or a
    timedelta, from a microsecond (the interval's unit) to a century,
    refused here, by its name, otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, timedelta)):
        raise InvalidArgument(f"unique_for must be a number of seconds or a timedelta, got {value!r}")
    s = seconds(value)
    if not 1e-6 <= s <= LONGEST_UNIQUE_FOR.total_seconds():
        raise InvalidArgument(f"unique_for must be from one microsecond to 100 years, got {s:g} seconds")
    window = interval(value)
    return max(window, timedelta(microseconds=1))


def require_job_groups(what: str) -> fx.Gen[None]:
    """Raises, naming `what`, unless the server's enqueue functions take groups
    and windows (0.4.0): an older one would refuse the call with 42883, which
    reads as pg_distlock not being installed at all."""
    found: Features = yield fx.Detect()
    if not found.job_groups:
        # Told once per connection: the update may have run since.
        found = yield fx.Detect(fresh=True)
    if not found.job_groups:
        raise needs_update(what)


def refuse_outside_transaction(autocommit: bool, status: Any) -> None:
    """complete_in_transaction() on an autocommit connection with no
    transaction open would commit the completion on its own."""
    if autocommit and status == TransactionStatus.IDLE:
        raise InvalidArgument(
            "complete_in_transaction needs a transaction open on the connection "
            "(`with conn.transaction():`), whose commit settles the job with the handler's writes"
        )


def completed_in(job: Job, completed: Any) -> None:
    """After complete_task ran in the caller's transaction."""
    if not completed:
        raise LeaseLost(
            f"job {job.id} attempt {job.attempts} is no longer worker {job.worker_id!r}'s to complete "
            "(its lease ran out and it was taken over): roll the transaction back"
        )
    job.completed_in_transaction = True


def consume_sql(batch: int, wait: bool, queues: bool = False) -> str:
    """Every column, read by name (execute_named): 0.4.0's claim functions
    added `queue`, and one connection may meet both (an update, a failover
    or a restore behind PgBouncer). Bare columns, so that a consumer waiting
    in the server holds back no vacuum horizon (src/queue/horizon.rs)."""
    args = "p_worker_id => %s, p_lease => %s"
    if batch > 1:
        args = "p_batch => %s, " + args
    if wait:
        args += ", p_wait => %s"
    if queues:
        args += ", p_queues => %s"
    return f"SELECT * FROM distlock.{'consume_tasks' if batch > 1 else 'consume_task'}({args})"


SETTLE_AND_CONSUME_SQL = (
    "SELECT * FROM distlock.settle_and_consume_tasks("
    "p_batch => %s, p_worker_id => %s, p_completed => %s, p_completed_attempts => %s,"
    " p_failed => %s, p_failed_attempts => %s, p_failed_errors => %s, p_lease => %s, p_wait => %s, p_queues => %s)"
)


@dataclass
class Settled:
    """What one settle_and_consume_tasks call did."""

    jobs: list[Job]
    """The jobs it claimed."""
    refused: set[int]
    """Jobs it was asked to settle that the worker no longer held (their
    lease ran out): left unchanged, to run again elsewhere."""


def queue_names(queues: Sequence[str] | None) -> list[str] | None:
    """The queues a consumer takes jobs from: None for every queue."""
    if queues is None:
        return None
    if isinstance(queues, str):
        raise InvalidArgument(f"queues must be a list of queue names, not the string {queues!r}")
    names = list(queues)
    if not names or not all(isinstance(q, str) and q.strip() for q in names):
        raise InvalidArgument(f"queues must name at least one queue, each a non-blank string, got {names!r}")
    return names


class QueueLogic(Bound[S]):
    def __init__(
        self,
        source: S,
        *,
        worker_id: str | None = None,
        lease: Seconds = 300.0,
        queues: Sequence[str] | None = None,
    ) -> None:
        super().__init__(source)
        self.worker_id = worker_id or holder_token()
        self._rt.label = f"pg_distlock:queue:{self.worker_id}"
        self.lease = positive(lease, "lease")
        self.queues = queue_names(queues)
        """What consume() takes jobs from (pg_distlock 0.3.0): None, every queue."""

    def _jobs(self, rows: Iterable[Mapping[str, Any]]) -> list[Job]:
        """Jobs of claimed rows (by column name). A server before 0.4.0 does
        not say a job's queue (it is the consumer's only queue when it named
        one, else None) nor its group (None)."""
        only = self.queues[0] if self.queues is not None and len(set(self.queues)) == 1 else None
        return [
            Job(row["task_id"], row["task_name"], row["payload"], row["attempts"], row["max_attempts"],
                row["lease_expires_at"], row["priority"], row["worker_id"], row.get("queue", only),
                row.get("group_key"))
            for row in rows
        ]

    def _enqueue_op(
        self,
        name: str,
        payload: Any = None,
        *,
        run_after: datetime | None = None,
        priority: int = 0,
        max_attempts: int = 5,
        queue: str | None = None,
        unique_key: str | None = None,
        group: str | None = None,
        unique_for: Seconds | None = None,
    ) -> fx.Gen[int]:
        sql = (
            "SELECT distlock.enqueue_task(p_task_name => %s, p_payload => %s,"
            " p_run_after => coalesce(%s::timestamptz, now()), p_priority => %s, p_max_attempts => %s"
        )
        params: tuple[Any, ...] = (name, Jsonb({} if payload is None else payload), run_after, priority, max_attempts)
        # Named only when given, so that a server before 0.3.0 (no queues) still takes the call.
        if queue is not None:
            sql += ", p_queue => %s"
            params += (queue,)
        if unique_key is not None:
            sql += ", p_unique_key => %s"
            params += (unique_key,)
        if unique_for is not None and unique_key is None:
            raise InvalidArgument("unique_for needs unique_key: it says how long a completed job keeps the key")
        window = None if unique_for is None else unique_window(unique_for)
        if group is not None or window is not None:
            yield from require_job_groups("group" if group is not None else "unique_for")
        if group is not None:
            sql += ", p_group => %s"
            params += (group,)
        if window is not None:
            sql += ", p_unique_for => %s"
            params += (window,)
        job_id = yield from fx.first(sql + ")", params)
        return int(job_id)

    def _enqueue_many_op(
        self,
        name: str,
        payloads: Sequence[Any],
        *,
        run_after: datetime | None = None,
        priority: int = 0,
        max_attempts: int = 5,
        queue: str | None = None,
        group: str | None = None,
    ) -> fx.Gen[list[int]]:
        if isinstance(payloads, (str, bytes, dict)):
            raise InvalidArgument(f"payloads must be a list of payloads, got {type(payloads).__name__}")
        sql = (
            "SELECT id FROM distlock.enqueue_tasks(p_task_name => %s, p_payloads => %s::jsonb[],"
            " p_run_after => coalesce(%s::timestamptz, now()), p_priority => %s, p_max_attempts => %s"
        )
        wrapped = [Jsonb({} if payload is None else payload) for payload in payloads]
        params: tuple[Any, ...] = (name, wrapped, run_after, priority, max_attempts)
        if queue is not None:
            sql += ", p_queue => %s"
            params += (queue,)
        if group is not None:
            yield from require_job_groups("group")
            sql += ", p_group => %s"
            params += (group,)
        rows = yield from fx.execute(sql + ") AS id", params)
        return [int(row[0]) for row in rows]

    def _consume_op(
        self, batch: int = 1, wait: Seconds = 0.0, *, on: fx.Session | None = None, until: fx.Flag | None = None
    ) -> fx.Gen[list[Job]]:
        """Up to `batch` jobs, waiting up to `wait` seconds for one: in the
        server when it offers that, else polling with a short backoff."""
        wait_s = non_negative(wait, "wait")
        at_least(batch, "batch", 1)
        # Getting a connection counts against the wait (with at least a
        # second for it, as for a lock): a pool with none to give raises
        # Unavailable in about that time, not after its own timeout, and the
        # time spent getting one is not waited again in the server.
        started = time.monotonic()
        deadline = started + wait_s
        checkout_by = started + max(wait_s, MIN_CONNECT_WAIT)
        found = yield fx.Detect(on, checkout_by)
        in_server = wait_s > 0 and (found.consume_batch_wait if batch > 1 else found.consume_wait)
        params: tuple[Any, ...] = (self.worker_id, interval(self.lease))
        if batch > 1:
            params = (batch, *params)
        routed = self.queues is not None
        tail: tuple[Any, ...] = (self.queues,) if routed else ()
        if in_server:
            while True:
                if until is not None and until.is_set():
                    return []
                left = max(deadline - time.monotonic(), 0.0)
                try:
                    rows = yield from fx.execute_named(
                        consume_sql(batch, True, routed), (*params, interval(left), *tail), on=on,
                        checkout_by=max(checkout_by, time.monotonic() + MIN_CONNECT_WAIT),
                    )
                except Cancelled:
                    # A worker's stop(), or the session's statement_timeout shorter
                    # than the wait: no job came, and none was claimed.
                    return []
                left = deadline - time.monotonic()
                # The server returns no job before the wait is over when its
                # look raced another consumer's claim (it never sleeps with a
                # transaction id): wait out the rest in another call.
                if rows or left <= 0:
                    return self._jobs(rows)
        delay = 0.05
        while True:
            rows = yield from fx.execute_named(
                consume_sql(batch, False, routed), (*params, *tail), on=on,
                checkout_by=max(checkout_by, time.monotonic() + MIN_CONNECT_WAIT),
            )
            left = deadline - time.monotonic()
            if rows or left <= 0:
                return self._jobs(rows)
            if (yield fx.Sleep(min(delay, left), until)):
                return []
            delay = min(delay * 2, 1.0)

    def _settle_and_consume_op(
        self,
        completed: Sequence[Job],
        failed: Sequence[tuple[Job, str | None]],
        batch: int = 1,
        wait: Seconds = 0.0,
        *,
        on: fx.Session | None = None,
    ) -> fx.Gen[Settled]:
        """Completes `completed`, fails `failed` (each with its error) and
        claims up to `batch` jobs in one call, one commit (pg_distlock
        0.3.0). Waits up to `wait` seconds for a job only when it had nothing
        to settle."""
        at_least(batch, "batch", 1)
        params = (
            batch, self.worker_id,
            [j.id for j in completed], [j.attempts for j in completed],
            [j.id for j, _ in failed], [j.attempts for j, _ in failed], [e for _, e in failed],
            interval(self.lease), interval(non_negative(wait, "wait")), self.queues,
        )
        try:
            rows = yield from fx.execute_named(SETTLE_AND_CONSUME_SQL, params, on=on)
        except Cancelled:
            if completed or failed:
                raise
            return Settled([], set())
        return Settled(
            self._jobs(row for row in rows if row["outcome"] == "claimed"),
            {row["task_id"] for row in rows if row["outcome"] == "refused"},
        )

    def _complete_op(self, job: Job) -> fx.Gen[bool]:
        """True if this attempt was still ours and is now completed."""
        return bool((yield from fx.first(COMPLETE_SQL, (job.id, self.worker_id, job.attempts))))

    def _complete_many_op(self, jobs: Iterable[Job], on: fx.Session | None = None) -> fx.Gen[set[int]]:
        """The ids of the jobs completed: in one call when the server offers
        complete_tasks, else one by one."""
        jobs = list(jobs)
        if not jobs:
            return set()
        found = yield fx.Detect(on)
        if found.complete_batch:
            rows = yield from fx.execute(
                "SELECT * FROM distlock.complete_tasks(p_task_ids => %s, p_worker_id => %s, p_attempts => %s)",
                ([j.id for j in jobs], self.worker_id, [j.attempts for j in jobs]), on=on,
            )
            return {row[0] for row in rows}
        done = set()
        for job in jobs:
            if (yield from self._complete_op(job)):
                done.add(job.id)
        return done

    def _fail_op(self, job: Job, error: str | None = None) -> fx.Gen[bool]:
        """Retried later with backoff, or dead after max_attempts."""
        return bool((yield from fx.first(
            "SELECT distlock.fail_task(%s, %s, %s, %s)", (job.id, error, self.worker_id, job.attempts)
        )))

    def _extend_op(self, job: Job, lease: Seconds | None = None) -> fx.Gen[bool]:
        return bool((yield from fx.first(
            "SELECT distlock.extend_task_lease(%s, %s, %s, %s)",
            (job.id, interval(self.lease if lease is None else lease), self.worker_id, job.attempts),
        )))
