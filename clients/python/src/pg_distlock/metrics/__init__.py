"""Prometheus metrics of pg_distlock: `pg-distlock metrics --listen` and the
console's /metrics (extra `console`: prometheus_client, PyYAML).

The metrics are defined once, in `pg_distlock.collector.yml`, a collector
file in sql_exporter's format: this module runs its queries at each scrape
(one short autocommit statement each, on a pooled connection) and turns
their rows into samples as sql_exporter does (key_labels, values,
value_label). Those who already run sql_exporter use the same file."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from importlib import resources
from typing import Any, Callable, Iterator, Optional

import psycopg
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
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
                    families.append(samples(definition, rows))
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
            # distlock.lock_stats without shared memory: there is nothing to
            # count, which is not an error of the scrape.
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


def serve(dsn: str, host: str = "127.0.0.1", port: int = 9188, listening: Callable[[], None] = lambda: None) -> None:
    """Serves /metrics on host:port until interrupted; `listening` is called
    once the port is bound."""
    from prometheus_client import start_http_server

    pool = open_pool(dsn)
    pool.open()
    try:
        server, thread = start_http_server(port, addr=host, registry=registry(pool))
        listening()
        try:
            thread.join()
        finally:
            server.shutdown()
    finally:
        pool.close()
