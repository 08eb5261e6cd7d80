"""QueueWorker: claims jobs for its handlers and settles them in batches.

One fetcher claims jobs on the worker's own connection while it holds fewer
than `capacity` (its concurrency, plus `prefetch` claimed ahead) and hands
them to `concurrency` handler slots. A slot that finishes a job queues
its outcome; the fetcher's next claim settles every queued outcome in the
same statement (settle_and_consume_tasks: one commit for the batch it
settles and the jobs it claims). While the fetcher waits in the server for
new jobs, a completer settles the outcomes that come meanwhile every
`flush_interval`, so a finished job never waits for the queue to get work.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Generic, Sequence, TypeVar

from . import effects as fx
from . import telemetry
from .held_jobs import HeldJobs
from .keeper import Seconds, at_least, non_negative, positive
from .loop import Loop, Worker, WorkerStats, error_text
from .queue import Job, QueueLogic
from ..errors import Cancelled, LeaseLost, Unavailable

log = telemetry.logger("queue")

S = TypeVar("S")

Outcome = tuple[Job, "str | None"]
"""A finished job and its error (None: completed)."""

JOB_DONE = 1
STOP = 0


class QueueWorkerLogic(Generic[S], Worker):
    """Consumes jobs in a loop and runs `handler(job)` for each, up to
    `concurrency` at once: completed when it returns, failed with the error
    text when it raises."""

    def __init__(
        self,
        source: S,
        handler: Callable[[Job], Any],
        *,
        worker_id: str | None = None,
        concurrency: int = 1,
        prefetch: int = 0,
        batch: int | None = None,
        wait: Seconds = 5.0,
        lease: Seconds = 300.0,
        heartbeat: Seconds | None = None,
        flush_interval: Seconds = 0.005,
        exit_when_idle: bool = False,
        handle_signals: bool = True,
        max_jobs: int | None = None,
        queues: Sequence[str] | None = None,
    ) -> None:
        self.queue: QueueLogic[Any] = self._queue(source, worker_id=worker_id, lease=lease, queues=queues)
        self._rt: Any = self.queue._rt
        self._rt.label = f"pg_distlock:queue_worker:{self.queue.worker_id}"
        self._rt.accept_callable(handler, "the handler")
        self.handler = handler
        self.concurrency = at_least(concurrency, "concurrency", 1)
        self.capacity = self.concurrency + at_least(prefetch, "prefetch", 0)
        """How many jobs the worker holds at most: running, or claimed ahead
        to start the moment a handler is free."""
        if batch is not None:
            self.capacity = max(self.capacity, at_least(batch, "batch", 1))
        self.wait = non_negative(wait, "wait")
        self.heartbeat = positive(heartbeat, "heartbeat") if heartbeat is not None else self.queue.lease / 3
        self.flush_interval = non_negative(flush_interval, "flush_interval")
        self.max_jobs = max_jobs
        self._loop = Loop(self._rt, exit_when_idle, handle_signals)
        self._counting = threading.Lock()

    _queue: Callable[..., Any]

    def _run_op(self) -> fx.Gen[WorkerStats]:
        rt, loop = self._rt, self._loop
        loop.started = True
        self._ready: fx.Channel = rt.new_channel()
        self._freed: fx.Channel = rt.new_channel()
        self._outcomes: fx.Channel = rt.new_channel()
        self._fetcher_asleep: fx.Flag = rt.new_flag()
        self._finished: fx.Flag = rt.new_flag()
        self._held = HeldJobs(self.queue.lease, self.heartbeat, self.queue._extend_op, self._finished)
        loop.on_stop[:] = [lambda: self._freed.put(STOP)]
        tasks, helpers = [], []
        # One handler at a time runs in the fetcher itself: no hand-offs
        # between threads, which cost more than the job's own round trip.
        for _ in range(self.concurrency if self.concurrency > 1 else 0):
            tasks.append((yield fx.Spawn(self._slot())))
        for helper in (self._held.renewing(), self._held.watching(), self._completing()):
            helpers.append((yield fx.Spawn(helper)))
        try:
            yield from self._fetching(slots=bool(tasks))
        finally:
            for _ in tasks:
                self._ready.put(None)
            for task in tasks:
                yield fx.Join(task)
            self._finished.set()
            self._fetcher_asleep.set()
            for task in helpers:
                yield fx.Join(task)
            yield from self._settle_apart(self._take_outcomes(), keep=False)
            yield from loop.disconnect()
        return loop.stats

    def _fetching(self, slots: bool) -> fx.Gen[None]:
        """Claims while there is room, on the loop's connection, until
        stopped, idle (exit_when_idle) or max_jobs were claimed; the jobs
        go to the handler slots, or without slots are run here one by one."""
        loop, stats = self._loop, self._loop.stats
        holding = 0
        # When the calls that found nothing began waiting: the server may
        # return one before its wait is over (a look that raced another
        # consumer's claim), which is not idle yet.
        waiting_since: float | None = None
        while True:
            holding -= self._count_freed()
            if loop.stopping.is_set() or (self.max_jobs is not None and stats.claimed >= self.max_jobs):
                return
            room = self.capacity - holding
            if self.max_jobs is not None:
                room = min(room, self.max_jobs - stats.claimed)
            if room <= 0:
                if (yield fx.Receive(self._freed)) == JOB_DONE:
                    holding -= 1
                continue
            session = yield from loop.connect()
            if session is None:
                return
            outcomes = self._take_outcomes()
            # Waiting in the server while jobs run: the completer settles
            # the ones that finish meanwhile.
            waits = not outcomes and self.wait > 0
            sent = time.monotonic()
            loop.waiting = waits
            if waits and holding > 0:
                self._fetcher_asleep.set()
            cut_short = False
            try:
                jobs = yield from self._claim(session, outcomes, room)
            except Unavailable as exc:
                self._put_back(outcomes)
                yield from loop.disconnect(exc)
                continue
            except Cancelled:
                # stop() or the session's statement_timeout ended the wait:
                # an idle round, on a new connection.
                self._put_back(outcomes)
                yield from loop.disconnect(discard=True)
                jobs = []
                cut_short = True
            except BaseException:
                self._put_back(outcomes)
                raise
            finally:
                loop.waiting = False
                self._fetcher_asleep.clear()
            if jobs or outcomes:
                waiting_since = None
            if jobs and not slots:
                self._hand_out(jobs, sent)
                for job in jobs:
                    yield from self._take(job)
                continue
            if jobs:
                self._hand_out(jobs, sent)
                for job in jobs:
                    self._ready.put(job)
                holding += len(jobs)
                continue
            if outcomes:
                continue  # a call that settled did not wait; the next one does
            if waits and not cut_short and not loop.stopping.is_set():
                waiting_since = sent if waiting_since is None else waiting_since
                if time.monotonic() - waiting_since < self.wait:
                    continue
            waiting_since = None
            if holding > 0:
                if self.wait == 0 or loop.exit_when_idle:
                    # Nothing to claim: the next chance is a job finishing.
                    if (yield fx.Receive(self._freed)) == JOB_DONE:
                        holding -= 1
                continue
            if not (yield from loop.idle(0.0)):
                return

    def _claim(self, session: fx.Session, outcomes: list[Outcome], room: int) -> fx.Gen[list[Job]]:
        found = yield fx.Detect(session)
        queue = self.queue
        if not found.settle_and_consume:
            yield from self._settle_apart(outcomes, keep=True)
            return (yield from queue._consume_op(room, self.wait, on=session, until=self._loop.stopping))
        settled = yield from queue._settle_and_consume_op(
            [job for job, error in outcomes if error is None],
            [(job, error) for job, error in outcomes if error is not None],
            room, self.wait, on=session,
        )
        self._count_settled(outcomes, settled.refused)
        return settled.jobs

    def _hand_out(self, jobs: list[Job], sent: float) -> None:
        self._loop.stats.claimed += len(jobs)
        for job in jobs:
            job.lost, job.cancelled = self._rt.new_flag(), self._loop.cancelled
        self._held.add(jobs, sent)

    def _count_freed(self) -> int:
        freed = 0
        while (token := self._freed.take()) is not None:
            freed += token == JOB_DONE
        return freed

    def _take_outcomes(self) -> list[Outcome]:
        outcomes = []
        while (outcome := self._outcomes.take()) is not None:
            outcomes.append(outcome)
        return outcomes

    def _put_back(self, outcomes: list[Outcome]) -> None:
        for outcome in outcomes:
            self._outcomes.put(outcome)

    def _slot(self) -> fx.Gen[None]:
        """Runs the handler on one job after another, until told to end."""
        while (job := (yield fx.Receive(self._ready))) is not None:
            try:
                yield from self._take(job)
            finally:
                self._freed.put(JOB_DONE)

    def _take(self, job: Job) -> fx.Gen[None]:
        try:
            yield from self._run(job)
        except Exception:
            # A settle the server refused with an error: the worker goes on.
            log.exception("pg_distlock: job %s (%s) could not be settled", job.id, job.name)
        finally:
            self._held.discard(job)

    def _run(self, job: Job) -> fx.Gen[None]:
        loop = self._loop
        if loop.cancelled.is_set():
            # stop(timeout) ran out: retried elsewhere without waiting for its lease.
            if (yield from self._settle(self.queue._fail_op(job, "not started: the worker was stopped"))):
                self._count(failed=1)
            return
        if job.lost.is_set():
            self._count(lost=1)
            return
        started = time.monotonic()
        try:
            with telemetry.span("job", job.name, **{"pg_distlock.job_id": job.id}):
                yield from loop.call(self.handler, job)
        except LeaseLost:
            self._report(job, "lost", started)
            self._count(lost=1)
            return
        except Exception as exc:
            log.exception("pg_distlock: job %s (%s) failed", job.id, job.name)
            self._report(job, "failed", started)
            self._outcomes.put((job, error_text(exc)))
            return
        self._report(job, "completed", started)
        if job.completed_in_transaction:
            self._count(completed=1)
        else:
            self._outcomes.put((job, None))

    def _completing(self) -> fx.Gen[None]:
        """While the fetcher waits in the server, settles the outcomes that
        come in, each batch `flush_interval` after its first."""
        while not self._finished.is_set():
            if not (yield fx.Sleep(1.0, self._fetcher_asleep)):
                continue
            first = yield fx.Receive(self._outcomes, 0.1)
            if first is None:
                continue
            if self.flush_interval:
                yield fx.Sleep(self.flush_interval)
            outcomes = [first, *self._take_outcomes()]
            try:
                yield from self._settle_apart(outcomes, keep=True)
            except Unavailable:
                self._put_back(outcomes)  # for the fetcher, once it has reconnected
                yield fx.Sleep(0.5, self._finished)

    def _settle_apart(self, outcomes: list[Outcome], keep: bool) -> fx.Gen[None]:
        """Settles outcomes without claiming: complete_tasks, then fail_task
        for each failure. When the server cannot be reached, `keep` raises
        (the caller queues the outcomes again), else they are left to their
        leases. (An outcome queued again after its settle committed is
        refused the second time, and counted lost.)"""
        if not outcomes:
            return
        queue = self.queue
        completed = [job for job, error in outcomes if error is None]
        try:
            done = (yield from queue._complete_many_op(completed)) if completed else set()
            refused = {job.id for job in completed if job.id not in done}
            for job, error in outcomes:
                if error is not None and not (yield from queue._fail_op(job, error)):
                    refused.add(job.id)
        except Unavailable as exc:
            if keep:
                raise
            log.warning("pg_distlock: could not settle jobs (%s); their leases will run out", exc)
            self._count(lost=len(outcomes))
            return
        self._count_settled(outcomes, refused)

    def _count_settled(self, outcomes: list[Outcome], refused: set[int]) -> None:
        failed = sum(1 for job, error in outcomes if error is not None and job.id not in refused)
        self._count(completed=len(outcomes) - failed - len(refused), failed=failed, lost=len(refused))
        if refused:
            log.warning("pg_distlock: %d job(s) were no longer this worker's to settle (lease lost)", len(refused))

    def _count(self, completed: int = 0, failed: int = 0, lost: int = 0) -> None:
        with self._counting:
            stats = self._loop.stats
            stats.completed += completed
            stats.failed += failed
            stats.lost += lost

    @staticmethod
    def _report(job: Job, outcome: str, started: float) -> None:
        telemetry.emit(telemetry.Event("job", "queue", job.name, outcome, time.monotonic() - started))

    def _settle(self, op: fx.Gen[Any]) -> fx.Gen[Any]:
        try:
            return (yield from op)
        except Unavailable as exc:
            log.warning("pg_distlock: could not settle jobs (%s); their leases will run out", exc)
            return None
