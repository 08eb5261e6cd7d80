"""What the client reports besides its return values.

- Log records, on one logger per primitive: ``pg_distlock.lock``,
  ``pg_distlock.lease``, ``pg_distlock.semaphore``, ``pg_distlock.leader``,
  ``pg_distlock.queue`` (jobs), ``pg_distlock.task_worker`` (tasks),
  ``pg_distlock.worker`` (either worker's connection); all below
  ``pg_distlock``, which also has what no primitive owns.
- Events, to plain callbacks registered with `add_hook`: for users without
  OpenTelemetry.
- With ``opentelemetry-api`` installed (the ``otel`` extra), the same events
  as metrics (counters ``pg_distlock.acquired``, ``.renewed``, ``.lost``,
  ``.released``, ``pg_distlock.jobs``; histogram ``pg_distlock.job.duration``
  in seconds) and a span around each job and task handler. Without an SDK
  configured these are OpenTelemetry's no-ops.
"""

from __future__ import annotations

import logging
import threading
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable

otel_metrics: Any
otel_trace: Any
try:
    import opentelemetry.metrics as otel_metrics
    import opentelemetry.trace as otel_trace
except ImportError:  # the otel extra is not installed
    otel_metrics = otel_trace = None

VERSION = "0.3.0"


def logger(primitive: str) -> logging.Logger:
    return logging.getLogger(f"pg_distlock.{primitive}")


@dataclass(frozen=True)
class Event:
    """One thing that happened to a hold or a unit of work."""

    kind: str
    """acquired, renewed, lost, released (holds and leaderships), job or task (work done)."""
    primitive: str
    """lock, lease, semaphore, leader, queue or task_worker."""
    name: str
    """The lock key, lease, semaphore or group name, job name or task name."""
    outcome: str | None = None
    """For job and task: completed, failed or lost."""
    duration: float | None = None
    """For job and task: seconds the handler ran."""


Hook = Callable[[Event], Any]
_hooks: list[Hook] = []
_hooks_lock = threading.Lock()


def add_hook(hook: Hook) -> Callable[[], None]:
    """Calls `hook(event)` for every event from now on (from the thread that
    saw it: keep it quick); returns a function that removes it. A hook that
    raises is logged and otherwise ignored."""
    with _hooks_lock:
        _hooks.append(hook)

    def remove() -> None:
        with _hooks_lock:
            if hook in _hooks:
                _hooks.remove(hook)

    return remove


class _Instruments:
    def __init__(self) -> None:
        meter = otel_metrics.get_meter("pg_distlock", VERSION)
        self.counters = {
            kind: meter.create_counter(f"pg_distlock.{kind}", description=f"holds and leaderships {kind}")
            for kind in ("acquired", "renewed", "lost", "released")
        }
        self.work = meter.create_counter("pg_distlock.jobs", description="jobs and tasks handled, by outcome")
        self.duration = meter.create_histogram("pg_distlock.job.duration", unit="s", description="handler time")


_instruments: _Instruments | None = None


def _otel(event: Event) -> None:
    global _instruments
    if otel_metrics is None:
        return
    if _instruments is None:
        _instruments = _Instruments()
    attributes = {"pg_distlock.primitive": event.primitive}
    if event.kind in _instruments.counters:
        _instruments.counters[event.kind].add(1, attributes)
    else:
        attributes["pg_distlock.outcome"] = event.outcome or "unknown"
        _instruments.work.add(1, attributes)
        if event.duration is not None:
            _instruments.duration.record(event.duration, attributes)


def emit(event: Event) -> None:
    with _hooks_lock:
        hooks = list(_hooks)
    for hook in hooks:
        try:
            hook(event)
        except Exception:
            logger(event.primitive).exception("pg_distlock: a telemetry hook failed")
    _otel(event)


def span(primitive: str, name: str, **attributes: Any) -> AbstractContextManager[Any]:
    """A span around one job or task handler, when OpenTelemetry is there."""
    if otel_trace is None:
        return nullcontext()
    tracer = otel_trace.get_tracer("pg_distlock", VERSION)
    started: AbstractContextManager[Any] = tracer.start_as_current_span(
        f"pg_distlock.{primitive}", attributes={"pg_distlock.name": name, **attributes}
    )
    return started
