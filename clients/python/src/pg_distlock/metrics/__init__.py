"""Prometheus metrics of pg_distlock: `pg-distlock metrics --listen` and the
console's /metrics (extra `console`: prometheus_client, PyYAML).

The metrics are defined once, in `pg_distlock.collector.yml`, a collector
file in sql_exporter's format: this module runs its queries at each scrape
(one short autocommit statement each, on a pooled connection) and turns
their rows into samples as sql_exporter does (key_labels, values,
value_label). Those who already run sql_exporter use the same file.

sql_exporter has no histogram type, so the file spells a histogram as three
metrics, NAME_bucket (its `le` label the value_label of one column per
bound), NAME_sum and NAME_count, all of one query; this
module serves them as one family NAME of type histogram (its _count from the
+Inf bucket), which `promtool check metrics` accepts."""

from __future__ import annotations

import logging
import socket
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Iterable, Iterator, Optional
from wsgiref.simple_server import WSGIRequestHandler, make_server

import psycopg
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ..inspect import reads

__all__ = ["COLLECTOR_FILE", "Definition", "DatabaseCollector", "definitions", "registry", "serve"]

COLLECTOR_FILE = "pg_distlock.collector.yml"
# Within Prometheus' default scrape timeout (10 s): a database that does not
# answer shows as pg_distlock_up 0 rather than as a failed scrape.
CONNECT_SECONDS = 5.0
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Definition:
    name: str
    kind: str
    help: str
    query: str
    key_labels: tuple[str, ...]
    values: tuple[str, ...]
    value_label: Optional[str]


def definitions() -> list[Definition]:
    """The metrics of the collector file, each with its query's text."""
    text = resources.files(__package__).joinpath(COLLECTOR_FILE).read_text(encoding="utf-8")
    spec = yaml.safe_load(text)
    queries = {q["query_name"]: q["query"] for q in spec.get("queries", [])}
    found = []
    for metric in spec["metrics"]:
        found.append(Definition(
            name=metric["metric_name"], kind=metric["type"], help=metric["help"],
            query=metric.get("query") or queries[metric["query_ref"]],
            key_labels=tuple(metric.get("key_labels", ())), values=tuple(metric["values"]),
            value_label=metric.get("value_label")))
    return found


HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")


def histograms(found: list[Definition]) -> dict[str, dict[str, Definition]]:
    """The histograms among `found`: by name, their _bucket (which has an
    `le` key label), _sum and _count definitions."""
    parts: dict[str, dict[str, Definition]] = {}
    for definition in found:
        for suffix in HISTOGRAM_PARTS:
            if definition.name.endswith(suffix):
                parts.setdefault(definition.name[:-len(suffix)], {})[suffix] = definition
    return {name: p for name, p in parts.items()
            if len(p) == len(HISTOGRAM_PARTS) and p["_bucket"].value_label == "le"}


def histogram(name: str, parts: dict[str, Definition], rows: dict[str, list[dict[str, Any]]]) -> Metric:
    """One histogram family from the rows of its _bucket and _sum queries
    (the same one, read once, in the collector file): per label set, the
    cumulative buckets (one column per upper bound, named by it: the
    _bucket's values, with `le` its value_label) in the order of their
    bounds. A label set without a +Inf bucket or a sum gives no sample."""
    bucket, total = parts["_bucket"], parts["_sum"]
    labels = list(bucket.key_labels)
    family = HistogramMetricFamily(name, bucket.help, labels=labels)
    buckets: dict[tuple[str, ...], list[tuple[float, float]]] = {}
    for row in rows["_bucket"]:
        key = tuple(str(row[label]) for label in labels)
        for le in bucket.values:
            value = row[le]
            if value is not None:
                buckets.setdefault(key, []).append((float(le), float(value)))
    sums = {tuple(str(row[label]) for label in labels): row[total.values[0]] for row in rows["_sum"]}
    for key, found in buckets.items():
        found.sort()
        if sums.get(key) is None or found[-1][0] != float("inf"):
            continue
        bounds = [(floatToGoString(le), value) for le, value in found]  # type: ignore[no-untyped-call]
        family.add_metric(list(key), bounds, float(sums[key]))
    return family


def _family(definition: Definition) -> Metric:
    labels = [*definition.key_labels, *([definition.value_label] if definition.value_label else [])]
    if definition.kind == "counter":
        return CounterMetricFamily(definition.name, definition.help, labels=labels)
    return GaugeMetricFamily(definition.name, definition.help, labels=labels)


def samples(definition: Definition, rows: list[dict[str, Any]]) -> Metric:
    """The metric family of `definition` from its query's rows; a NULL value
    gives no sample."""
    family = _family(definition)
    for row in rows:
        keys = [str(row[label]) for label in definition.key_labels]
        for column in definition.values:
            value = row[column]
            if value is None:
                continue
            labels = [*keys, column] if definition.value_label else keys
            family.add_metric(labels, float(value))  # type: ignore[attr-defined]
    return family


class DatabaseCollector(Collector):
    """Collects every metric of the collector file from one database at
    each scrape. A query the role may not run (or the installed version
    cannot answer) leaves its metrics out and is logged; one that needs
    shared memory the server does not give (SQLSTATE 55000) gives no samples;
    pg_distlock_scrape_errors counts them and pg_distlock_up says whether
    the database answered at all."""

    def __init__(self, pool: ConnectionPool[Any]) -> None:
        self.pool = pool
        self.definitions = definitions()
        self.histograms = histograms(self.definitions)
        self.histogram_parts = {d.name for parts in self.histograms.values() for d in parts.values()}
        # One scrape at a time: two Prometheus servers scraping at once
        # must not take two connections from a small pool.
        self.lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            yield from self._collect()

    def _collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("pg_distlock_up", "1 when the database answered and has pg_distlock installed.")
        errors = 0
        families: list[Metric] = []
        try:
            with self.pool.connection(timeout=CONNECT_SECONDS) as conn:
                reads.require_installed(conn)
                answers: dict[str, Optional[list[dict[str, Any]]]] = {}
                for definition in self.definitions:
                    if definition.query not in answers:
                        answers[definition.query] = self._rows(conn, definition)
                    rows = answers[definition.query]
                    if rows is None:
                        errors += 1
                        continue
                    if definition.name not in self.histogram_parts:
                        families.append(samples(definition, rows))
                for name, parts in self.histograms.items():
                    part_rows = {suffix: answers[d.query] for suffix, d in parts.items()}
                    if all(r is not None for r in part_rows.values()):
                        families.append(histogram(name, parts, part_rows))  # type: ignore[arg-type]
        except (psycopg.Error, reads.NotInstalled) as error:
            log.warning("pg_distlock metrics: %s", error)
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        failed = GaugeMetricFamily("pg_distlock_scrape_errors",
                                   "Metrics of pg_distlock left out of this scrape because their query failed.")
        failed.add_metric([], float(errors))
        yield failed
        yield from families

    @staticmethod
    def _rows(conn: psycopg.Connection[Any], definition: Definition) -> Optional[list[dict[str, Any]]]:
        try:
            with conn.cursor(row_factory=dict_row) as cur:
                cur.execute(definition.query.encode())
                return list(cur.fetchall())
        except psycopg.errors.ObjectNotInPrerequisiteState:
            # distlock.lock_stats or queue_counters() without shared memory:
            # there is nothing to count, which is not an error of the scrape.
            return []
        except psycopg.Error as error:
            if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                conn.rollback()
            log.warning("pg_distlock metrics: %s: %s", definition.name, str(error).strip())
            return None


def open_pool(dsn: str, size: int = 1) -> ConnectionPool[Any]:
    return ConnectionPool(dsn, min_size=1, max_size=size, open=False, name="pg-distlock metrics",
                          kwargs={"autocommit": True, "application_name": "pg-distlock metrics",
                                  "connect_timeout": int(CONNECT_SECONDS)})


def registry(pool: ConnectionPool[Any]) -> CollectorRegistry:
    """A registry holding pg_distlock's metrics only (no process metrics)."""
    found = CollectorRegistry(auto_describe=False)
    found.register(DatabaseCollector(pool))
    return found


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass


def exposition_app(scraped: CollectorRegistry) -> Callable[..., Iterable[bytes]]:
    """A WSGI app serving `scraped` at / and /metrics in the text format,
    with prometheus_client's CONTENT_TYPE_LATEST, as the console's /metrics
    does: never OpenMetrics, whatever the scraper's Accept header asks (in
    OpenMetrics the gauge pg_distlock_queue_jobs and the counter
    pg_distlock_queue_jobs_total would be one family named twice)."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "/") not in ("/", "/metrics"):
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [b"not found: pg_distlock metrics are at /metrics\n"]
        body = generate_latest(scraped)
        start_response("200 OK", [("Content-Type", CONTENT_TYPE_LATEST), ("Cache-Control", "no-store")])
        return [body]
    return app


def serve(dsn: str, host: str = "127.0.0.1", port: int = 9188, listening: Callable[[], None] = lambda: None) -> None:
    """Serves /metrics on host:port until interrupted; `listening` is called
    once the port is bound."""
    from prometheus_client.exposition import ThreadingWSGIServer

    class Server(ThreadingWSGIServer):
        address_family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

    pool = open_pool(dsn)
    pool.open()
    try:
        server = make_server(host, port, exposition_app(registry(pool)), Server, handler_class=_Quiet)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        listening()
        try:
            thread.join()
        finally:
            server.shutdown()
    finally:
        pool.close()
