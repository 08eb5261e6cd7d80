"""What TaskWorker and QueueWorker share: a stop flag that signals set, a
connection reopened with backoff after a failure or failover, counters."""

from __future__ import annotations

import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar

from . import effects as fx
from ..errors import Cancelled, Misconfigured, Unavailable

log = logging.getLogger("pg_distlock.worker")

T = TypeVar("T")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class WorkerStats:
    claimed: int = 0
    completed: int = 0
    failed: int = 0
    lost: int = 0
    """Claims or jobs lost while running: not released, their result not recorded."""
    reconnects: int = 0


class Loop:
    """A worker loop's connection and stop flag."""

    def __init__(self, rt: Any, exit_when_idle: bool, handle_signals: bool) -> None:
        self._rt = rt
        self.stopping: Any = rt.new_flag()
        """An Event set when the worker was asked to stop (stop(), SIGTERM,
        SIGINT): it finishes the task at hand and takes no other."""
        self.exit_when_idle = exit_when_idle
        self.handle_signals = handle_signals
        self.stats = WorkerStats()
        self.cancelled: Any = rt.new_flag()
        """An Event set when stop(timeout) ran out with a handler still
        running: the handler should give up by raising, which records its job
        or claim as failed (the asyncio driver cancels it outright)."""
        self.started = False
        self.ended: Any = rt.new_flag()
        """An Event set by run() as it returns, its connections closed."""
        self.session: fx.Session | None = None
        self.waiting = False
        """True while fetching work, when stop() cancels the statement."""
        self.reconnect_when_idle_for = 60.0
        """With exit_when_idle, how long (seconds) reconnects may fail before
        run() raises the last error: long enough for a failover."""
        self.on_stop: list[Callable[[], None]] = []
        """Called by stop(), from the thread or task that calls it: wakes
        what waits for something other than the server."""

    def stop(self) -> None:
        """Asks the worker to stop after the task at hand; a wait for work in
        the server is cancelled, so an idle worker ends at once."""
        self.stopping.set()
        for wake in self.on_stop:
            wake()
        session = self.session
        if self.waiting and session is not None:
            self._rt.cancel(session)

    def stopped(self, timeout: float | None) -> fx.Gen[bool]:
        """After stop(): waits up to `timeout` seconds for run() to return,
        then cancels the handler at work and waits as long again. True once
        run() has returned or was never started."""
        if not self.started or self.ended.is_set() or timeout is None:
            return not self.started or self.ended.is_set()
        if (yield fx.Sleep(timeout, self.ended)):
            return True
        log.warning("pg_distlock: the worker did not stop within %g s: cancelling the handler at work", timeout)
        self.cancelled.set()
        return bool((yield fx.Sleep(timeout, self.ended)))

    def call(self, handler: Callable[..., Any], item: Any) -> fx.Gen[Any]:
        """Runs the handler on one job or claim, cancellable by stop(timeout)."""
        return (yield fx.Call(handler, (item,), cancel=self.cancelled))

    def connect(self) -> fx.Gen[fx.Session | None]:
        """The loop's connection, opened again after a failure with backoff;
        None once the worker is stopping."""
        delay = 0.1
        failing_since: float | None = None
        while self.session is None:
            if self.stopping.is_set():
                return None
            try:
                self.session = yield fx.Open()
            except Misconfigured:
                raise  # a wrong conninfo, role or database: run() raises it at once
            except Unavailable as exc:
                now = time.monotonic()
                failing_since = now if failing_since is None else failing_since
                if self.exit_when_idle and now - failing_since >= self.reconnect_when_idle_for:
                    # A worker meant to end once it runs out of work does not
                    # wait forever for a server that is gone.
                    raise
                log.warning("pg_distlock: cannot connect (%s), retrying in %.1f s", exc, delay)
                if (yield fx.Sleep(delay, self.stopping)):
                    return None
                delay = min(delay * 2, 5.0)
        return self.session

    def disconnect(self, reason: Exception | None = None, discard: bool = False) -> fx.Gen[None]:
        if self.session is None:
            return
        session, self.session = self.session, None
        if reason is not None:
            log.warning("pg_distlock: connection lost (%s), reconnecting", reason)
            self.stats.reconnects += 1
        yield fx.Close(session, discard=discard or reason is not None)

    def idle(self, poll_interval: float) -> fx.Gen[bool]:
        """After finding no work: False when the loop should end."""
        if self.exit_when_idle:
            return False
        yield fx.Sleep(poll_interval, self.stopping)
        return not self.stopping.is_set()

    def run(
        self,
        fetch: Callable[[fx.Session], fx.Gen[list[T]]],
        handle: Callable[[fx.Session, list[T], float], fx.Gen[None]],
        limit: int | None,
        poll_interval: float | Callable[[], float],
        claimed_ahead: Callable[[], bool] = lambda: False,
    ) -> fx.Gen[WorkerStats]:
        """Fetches work on the loop's connection and handles it until stopped,
        idle (with exit_when_idle) or `limit` items were claimed; a connection
        failure while fetching reconnects, with backoff. After a fetch that
        found nothing it sleeps `poll_interval` (or what it returns, asked
        after that fetch). While
        `claimed_ahead()`, work the last handling claimed is still to run, so
        a stop waits for it."""
        self.started = True
        try:
            while ((not self.stopping.is_set() or claimed_ahead())
                   and (limit is None or self.stats.claimed < limit)):
                session = yield from self.connect()
                if session is None:
                    break
                try:
                    sent = time.monotonic()
                    self.waiting = True
                    work = yield from fetch(session)
                except Unavailable as exc:
                    yield from self.disconnect(exc)
                    continue
                except Cancelled:
                    # stop() or the session's statement_timeout ended the fetch:
                    # an idle round. The connection may keep a session claim
                    # the cancelled statement took, so it is not reused.
                    yield from self.disconnect(discard=True)
                    work = []
                finally:
                    self.waiting = False
                if not work:
                    pause = poll_interval() if callable(poll_interval) else poll_interval
                    if not (yield from self.idle(pause)):
                        break
                    continue
                self.stats.claimed += len(work)
                yield from handle(session, work, sent)
        finally:
            yield from self.disconnect()
        return self.stats


class Worker:
    """The stop and stats of TaskWorker and QueueWorker."""

    _loop: Loop

    @property
    def stopping(self) -> Any:
        """An Event set once the worker was asked to stop."""
        return self._loop.stopping

    @property
    def stats(self) -> WorkerStats:
        return self._loop.stats


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
