"""TaskWorker: claims due scheduled tasks and runs a handler for each with
the claim's fencing token, keeping the claim alive and releasing it.

Lease-mode claims (when the server has them) are renewed by token from any
connection, so they survive a pooler and a failover; session claims live on
the worker's own connection and end with it. Either way the handler sees
`claim.lost` set the moment the claim can no longer be trusted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, TypeVar

from . import effects as fx
from . import telemetry
from .base import Bound
from .keeper import Keeper, Lost, LostCallback, Seconds, interval, non_negative, positive
from .loop import Loop, Worker, WorkerStats, default_worker_id, error_text
from ..errors import Cancelled, DistlockError, LeaseLost, PermissionDenied, Unavailable

log = telemetry.logger("task_worker")

S = TypeVar("S")
Mode = Literal["auto", "session", "lease"]

FETCH_SESSION = (
    "SELECT task_id, task_name, task_type, acquired, fencing_token"
    " FROM distlock.worker_fetch_and_execute_task(%s)"
)
FETCH_LEASE = (
    "SELECT task_id, task_name, task_type, acquired, fencing_token"
    " FROM distlock.worker_fetch_and_execute_task(%s, %s)"
)
# Seconds until the next task this caller may claim is due (0.4.0).
NEXT_WAIT_SQL = "SELECT EXTRACT(epoch FROM distlock.next_task_wait())::float8"
# Ends a run and claims the next due task in one call, one commit per run.
RELEASE_AND_FETCH_SESSION = (
    "SELECT task_id, task_name, task_type, acquired, fencing_token"
    " FROM distlock.release_and_fetch_task(%s, %s, %s, %s)"
)
RELEASE_AND_FETCH_LEASE = (
    "SELECT task_id, task_name, task_type, acquired, fencing_token"
    " FROM distlock.release_and_fetch_task(%s, %s, %s, %s, %s, %s)"
)


@dataclass
class TaskClaim:
    task_id: int
    task_name: str
    task_type: str
    token: int
    """The fencing token: pass it with every write the task makes."""
    mode: str
    worker_id: str
    lost: Any = field(repr=False)
    """An Event set the moment the claim is lost: stop, record nothing."""
    stopping: Any = field(repr=False)
    """An Event set when the worker was asked to stop (it will take no more tasks)."""
    cancelled: Any = field(repr=False)
    """An Event set when stop(timeout) ran out: give up by raising; the claim
    is released as failed."""
    _lost: Lost = field(repr=False)
    _sent: float = field(repr=False)
    """When the call that claimed it was sent (its lease runs from then)."""
    _session: Any = field(repr=False)
    """The connection that claimed it: a session claim lives and dies with it."""

    def check(self) -> None:
        """Raises LeaseLost if the claim was lost; call it before fenced writes."""
        self._lost.check()


class TaskWorkerLogic(Bound[S], Worker):
    def __init__(
        self,
        source: S,
        handler: Callable[[TaskClaim], Any],
        *,
        worker_id: str | None = None,
        mode: Mode = "auto",
        lease: Seconds = 30.0,
        heartbeat: Seconds | None = None,
        poll_interval: Seconds = 1.0,
        exit_when_idle: bool = False,
        handle_signals: bool = True,
        max_tasks: int | None = None,
        on_lost: LostCallback | None = None,
    ) -> None:
        super().__init__(source)
        self._rt.accept_callable(handler, "the handler")
        self.handler = handler
        self.worker_id = worker_id or default_worker_id()
        self._rt.label = f"pg_distlock:task_worker:{self.worker_id}"
        self.mode: Mode = mode
        self.lease = positive(lease, "lease")
        self.heartbeat = positive(heartbeat, "heartbeat") if heartbeat is not None else self.lease / 3
        self.poll_interval = non_negative(poll_interval, "poll_interval")
        self.max_tasks = max_tasks
        self.on_lost = on_lost
        self._loop = Loop(self._rt, exit_when_idle, handle_signals)
        self._ahead: list[TaskClaim] | None = None
        """What the last run's release claimed to run next (empty: it found
        nothing due); None when it did not look."""
        self._pause = self.poll_interval
        """How long to sleep after the last fetch found nothing."""
        self._wait_refused = False
        """Whether the server refused this role next_task_wait."""
        self._looked_again = False
        """Whether the last fetch was the look again after "due now"."""

    def _run_op(self) -> fx.Gen[WorkerStats]:
        return (yield from self._loop.run(
            self._fetch, self._execute, self.max_tasks, lambda: self._pause, lambda: bool(self._ahead),
        ))

    def _fetch(self, session: fx.Session) -> fx.Gen[list[TaskClaim]]:
        ahead, self._ahead = self._ahead, None
        if ahead and all(claim.mode == "lease" or claim._session is session for claim in ahead):
            return ahead
        # Not looked yet, a session claim whose connection was lost (it went
        # with it), or the last release found nothing: by its statement's
        # start, so a task that came due while it ran is looked for again
        # before the worker sleeps.
        mode = yield from self._mode(session)
        claim = yield from self._claim(session, mode)
        if claim is not None:
            self._looked_again = False
            return [claim]
        self._pause = yield from self._idle_pause(session)
        return []

    def _idle_pause(self, session: fx.Session) -> fx.Gen[float]:
        """After finding nothing: until the next task this worker may claim is
        due (a server that tells, 0.4.0), never longer than poll_interval. Told
        one is due now, it looks once more at once (the fetch judged by its
        statement's start: a task may have come due while it ran); told so
        again, the task is one it cannot take (another worker's, in flight),
        and it waits the whole poll_interval rather than poll without pause."""
        found = yield fx.Detect(session)
        if not found.next_task_wait or self._wait_refused:
            return self.poll_interval
        try:
            wait = yield from fx.first(NEXT_WAIT_SQL, on=session)
        except PermissionDenied:
            # A role given the worker's functions by hand before 0.4.0 (the
            # update grants next_task_wait to capabilities only): poll.
            self._wait_refused = True
            return self.poll_interval
        except (Unavailable, Cancelled):
            raise
        except DistlockError as exc:
            # Whatever the server says, an idle worker polls on rather than end.
            log.warning("pg_distlock: next_task_wait failed (%s); polling", exc)
            return self.poll_interval
        if wait is None or wait > 0:
            self._looked_again = False
            return self.poll_interval if wait is None else min(float(wait), self.poll_interval)
        if not self._looked_again:
            self._looked_again = True
            return 0.0
        return self.poll_interval

    def _mode(self, session: fx.Session) -> fx.Gen[str]:
        if self.mode != "auto":
            return self.mode
        found = yield fx.Detect(session)
        return "lease" if found.task_leases else "session"

    def _claim(self, session: fx.Session, mode: str) -> fx.Gen[TaskClaim | None]:
        sent = time.monotonic()
        if mode == "lease":
            rows = yield from fx.execute(FETCH_LEASE, (self.worker_id, interval(self.lease)), on=session)
        else:
            rows = yield from fx.execute(FETCH_SESSION, (self.worker_id,), on=session)
        return self._claim_from(rows[0], mode, session, sent)

    def _claim_from(self, row: Any, mode: str, session: fx.Session, sent: float) -> TaskClaim | None:
        task_id, task_name, task_type, acquired, token = row
        if not acquired:
            return None
        lost = Lost(self._rt.new_flag, self.on_lost)
        return TaskClaim(
            task_id, task_name, task_type, token, mode, self.worker_id, lost.flag, self._loop.stopping, self._loop.cancelled, lost,
            sent, session,
        )

    def _run_next(self, rows: Any, mode: str, session: fx.Session, sent: float) -> None:
        """The result of a release that also claimed: what the loop runs next."""
        claim = self._claim_from(rows[0], mode, session, sent)
        self._ahead = [] if claim is None else [claim]

    def _fetches_next(self, session: fx.Session) -> fx.Gen[bool]:
        """Whether a run's release should also claim the next due task: the
        server can, and the worker will run another."""
        if self._loop.stopping.is_set() or (self.max_tasks is not None and self._loop.stats.claimed >= self.max_tasks):
            return False
        try:
            found = yield fx.Detect(session)
        except Unavailable:
            # The connection is gone (a failover): the release alone retries elsewhere.
            return False
        return bool(found.release_and_fetch)

    def _renewer(self, session: fx.Session, claim: TaskClaim) -> Callable[[], fx.Gen[bool]]:
        if claim.mode == "lease":
            def renew_lease() -> fx.Gen[bool]:
                yield from fx.execute(
                    "SELECT distlock.renew_task_lease(%s, %s, %s)", (claim.task_id, claim.token, interval(self.lease))
                )
                return True
            return renew_lease

        def confirm_session() -> fx.Gen[bool]:
            # A session claim dies with its connection: no retrying elsewhere.
            try:
                current = yield from fx.first(
                    "SELECT distlock.check_fencing_token(%s, %s)", (claim.task_id, claim.token), on=session
                )
            except Unavailable:
                return False
            return bool(current)
        return confirm_session

    def _execute(self, session: fx.Session, claims: list[TaskClaim], _sent: float) -> fx.Gen[None]:
        [claim] = claims  # it knows when its claim was sent: a release may have claimed it ahead
        keeper = Keeper(
            self._rt.new_flag, claim._lost, self.lease, self.heartbeat, self._renewer(session, claim),
            f"the claim of task {claim.task_id} ({claim.task_name})",
        )
        yield from keeper.start(claim._sent)
        status, error = "completed", None
        started = time.monotonic()
        try:
            with telemetry.span("task", claim.task_name, **{"pg_distlock.task_id": claim.task_id}):
                yield from self._loop.call(self.handler, claim)
        except LeaseLost:
            status = "lost"
        except Exception as exc:
            log.exception("pg_distlock: task %s (%s) failed", claim.task_id, claim.task_name)
            status, error = "failed", error_text(exc)
        finally:
            yield from keeper.stop()
        lost = claim.lost.is_set() or status == "lost"
        telemetry.emit(telemetry.Event(
            "task", "task_worker", claim.task_name, "lost" if lost else status, time.monotonic() - started
        ))
        if lost:
            self._loop.stats.lost += 1
            if claim.mode == "session":
                # A claim the sweep revoked still holds its lock until released.
                yield from self._release_session(session, claim, "failed", claim._lost.reason)
            return
        fetch_next = yield from self._fetches_next(session)
        if claim.mode == "lease":
            done = yield from self._release_lease(session, claim, status, error, keeper, fetch_next)
        else:
            done = yield from self._release_session(session, claim, status, error, fetch_next)
        if done:
            if status == "completed":
                self._loop.stats.completed += 1
            else:
                self._loop.stats.failed += 1
        else:
            self._loop.stats.lost += 1

    def _release_session(
        self, session: fx.Session, claim: TaskClaim, status: str, error: str | None, fetch_next: bool = False,
    ) -> fx.Gen[bool]:
        try:
            if fetch_next:
                sent = time.monotonic()
                rows = yield from fx.execute(
                    RELEASE_AND_FETCH_SESSION, (claim.task_id, self.worker_id, status, error), on=session,
                )
                self._run_next(rows, "session", session, sent)
            else:
                yield from fx.execute(
                    "SELECT distlock.release_task_lock(%s, %s, %s, %s)", (claim.task_id, self.worker_id, status, error),
                    on=session,
                )
            return True
        except Unavailable as exc:
            yield from self._loop.disconnect(exc)
        except LeaseLost as exc:
            log.warning("pg_distlock: %s", exc)
        return False

    def _release_lease(
        self, session: fx.Session, claim: TaskClaim, status: str, error: str | None, keeper: Keeper, fetch_next: bool,
    ) -> fx.Gen[bool]:
        """Releases by token (and claims the next due task, with
        `fetch_next`), retrying the release alone from any connection through
        a failover until the lease would have run out."""
        if fetch_next:
            sent = time.monotonic()
            try:
                rows = yield from fx.execute(
                    RELEASE_AND_FETCH_LEASE,
                    (claim.task_id, claim.token, status, self.worker_id, interval(self.lease), error),
                    on=session,
                )
                self._run_next(rows, "lease", session, sent)
                return True
            except LeaseLost as exc:
                log.warning("pg_distlock: %s", exc)
                return False
            except Unavailable as exc:
                yield from self._loop.disconnect(exc)
        delay = 0.1
        while True:
            try:
                yield from fx.execute(
                    "SELECT distlock.release_task_lease(%s, %s, %s, %s)", (claim.task_id, claim.token, status, error)
                )
                return True
            except LeaseLost as exc:
                log.warning("pg_distlock: %s", exc)
                return False
            except Unavailable as exc:
                if time.monotonic() + delay >= keeper.deadline:
                    log.warning("pg_distlock: could not release task %s before its lease ran out: %s", claim.task_id, exc)
                    return False
                yield fx.Sleep(delay)
                delay = min(delay * 2, 2.0)


