"""Telemetry: a logger per primitive, events to plain hooks, and
OpenTelemetry metrics and spans (checked with the SDK's in-memory readers)."""

from __future__ import annotations

import logging
import threading
from typing import Iterator

import pytest
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import pg_distlock
from conftest import Db, eventually

# OpenTelemetry's global providers can be set once per process.
READER = InMemoryMetricReader()
SPANS = InMemorySpanExporter()
metrics.set_meter_provider(MeterProvider(metric_readers=[READER]))
_tracer_provider = TracerProvider()
_tracer_provider.add_span_processor(SimpleSpanProcessor(SPANS))
trace.set_tracer_provider(_tracer_provider)


@pytest.fixture
def events() -> Iterator[list[pg_distlock.TelemetryEvent]]:
    seen: list[pg_distlock.TelemetryEvent] = []
    lock = threading.Lock()

    def hook(event: pg_distlock.TelemetryEvent) -> None:
        with lock:
            seen.append(event)

    remove = pg_distlock.add_telemetry_hook(hook)
    yield seen
    remove()


def kinds(events: list[pg_distlock.TelemetryEvent], name: str) -> list[str]:
    return [e.kind for e in list(events) if e.name == name]


def test_holds_report_acquired_renewed_lost_and_released(db: Db, name: str, events: list[pg_distlock.TelemetryEvent]) -> None:
    with pg_distlock.Lease(db.dsn, name, ttl=0.6):
        eventually(lambda: "renewed" in kinds(events, name), timeout=5, what="a renewal")
    assert kinds(events, name)[0] == "acquired" and kinds(events, name)[-1] == "released"
    lock = pg_distlock.Lock(db.dsn, f"{name}-lock", check_every=0.1)
    lock.acquire()
    db.value("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
             f"pg_distlock:lock:{name}-lock")
    eventually(lambda: "lost" in kinds(events, f"{name}-lock"), timeout=5, what="the lock's loss")
    lock.close()
    assert [e.primitive for e in events if e.name == f"{name}-lock"][0] == "lock"


def job_points() -> dict[str, int]:
    counts: dict[str, int] = {}
    data = READER.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == "pg_distlock.jobs":
                    for point in metric.data.data_points:
                        outcome = str(point.attributes.get("pg_distlock.outcome"))
                        counts[outcome] = counts.get(outcome, 0) + int(point.value)
    return counts


def test_jobs_are_counted_timed_and_traced(db: Db, name: str, events: list[pg_distlock.TelemetryEvent],
                                           caplog: pytest.LogCaptureFixture) -> None:
    before = job_points()
    queue = pg_distlock.Queue(db.dsn)
    queue.enqueue(f"{name}-ok", {})
    queue.enqueue(f"{name}-bad", {}, max_attempts=1)

    def handler(job: pg_distlock.Job) -> None:
        if job.name.endswith("bad"):
            raise ValueError("no")

    with caplog.at_level(logging.ERROR, logger="pg_distlock"):
        pg_distlock.QueueWorker(db.dsn, handler, exit_when_idle=True, wait=0).run()
    outcomes = {e.name: e.outcome for e in events if e.kind == "job"}
    assert outcomes == {f"{name}-ok": "completed", f"{name}-bad": "failed"}
    assert all(e.duration is not None and e.duration >= 0 for e in events if e.kind == "job")
    after = job_points()
    assert after.get("completed", 0) - before.get("completed", 0) == 1
    assert after.get("failed", 0) - before.get("failed", 0) == 1
    spans = [s for s in SPANS.get_finished_spans() if s.attributes and str(s.attributes.get("pg_distlock.name", "")).startswith(name)]
    assert sorted(s.name for s in spans) == ["pg_distlock.job", "pg_distlock.job"]
    assert [r.name for r in caplog.records if "failed" in r.getMessage()] == ["pg_distlock.queue"]


def test_a_leader_logs_on_its_own_logger(db: Db, name: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="pg_distlock"):
        with pg_distlock.Leader(db.dsn, name, "n", ttl=2) as leader:
            assert leader.wait_elected(5)
    assert {r.name for r in caplog.records if "leads" in r.getMessage()} == {"pg_distlock.leader"}
