"""Prometheus metrics: the console's /metrics and `pg-distlock metrics`
against a database with real activity, scraped by a real Prometheus server
(Debian's `prometheus`) that answers PromQL about them."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from typing import Any, Iterator

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from conftest import Db, connect, eventually, free_port, lease_worker, lock_wait_chain
from pg_distlock import metrics
from test_cli import cli, dead_job
from test_console import console

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"


def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and sorted labels."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def activity(db: Db) -> None:
    """Task runs of every ending, a sweep, queued, dead and completed jobs, a
    held lease and semaphore slot, and a leader."""
    completed, failed, abandoned = db.add_tasks(3, "job")
    worker = connect(db.dsn)
    for task, status in ((completed, "completed"), (failed, "failed")):
        assert worker.execute("SELECT distlock.try_acquire_task_lock(%s, 'w')", (task,)).fetchone() == (True,)
        worker.execute("SELECT distlock.release_task_lock(%s, 'w', %s)", (task, status))
    gone = connect(db.dsn)
    assert gone.execute("SELECT distlock.try_acquire_task_lock(%s, 'w')", (abandoned,)).fetchone() == (True,)
    pid = gone.info.backend_pid
    gone.close()
    eventually(lambda: db.value("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", pid) == 0,
               what="the claiming session to end")
    assert db.value("SELECT count(*) FROM distlock.check_and_recover_timeout_tasks()") == 1
    assert worker.execute("SELECT distlock.try_acquire_task_lock(%s, 'w')", (completed,)).fetchone() == (True,)
    worker.close()  # a claim ended by nobody yet: running until the next sweep
    dead_job(db, "mail")
    for _ in range(2):
        db.value("SELECT distlock.enqueue_task('send', '{}', p_queue => 'mail')")
    job = db.value("SELECT distlock.enqueue_task('resize', '{}', p_queue => 'images')")
    db.value("SELECT distlock.complete_task(task_id, 'w') FROM distlock.consume_task('w', p_queues => ARRAY['images'])")
    # It waited 3 s from runnable to started.
    db.admin.execute("UPDATE distlock.completed_jobs SET started_at = created_at + interval '3 seconds' WHERE id = %s",
                     (job,))
    db.value("SELECT distlock.acquire_lease('primary', 'node-a', '1 hour')")
    db.value("SELECT distlock.acquire_semaphore('exports', 2, 'node-a', '1 hour')")
    db.value("SELECT is_leader FROM distlock.try_become_leader('planner', 'node-a', '1 hour')")


def test_the_metrics_count_what_happened(db: Db) -> None:
    activity(db)
    with lock_wait_chain(db, "orders", waiters=1):
        eventually(lambda: db.value("SELECT count(*) FROM distlock.lock_waits") == 1, what="a waiter")
        with console(db.dsn) as (client, _):
            response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain; version=")
    found = parse(response.text)
    assert found[("pg_distlock_up", ())] == 1 and found[("pg_distlock_scrape_errors", ())] == 0
    # Four claims: three ended (one by the sweep), one still running.
    assert found[("pg_distlock_task_claims_total", ())] == 4
    assert found[("pg_distlock_task_claims_running", ())] == 1
    releases = {status: found[("pg_distlock_task_releases_total", (("status", status),))]
                for status in ("completed", "failed", "timed_out", "abandoned")}
    assert releases == {"completed": 1, "failed": 1, "timed_out": 0, "abandoned": 1}
    assert found[("pg_distlock_sweep_runs_total", ())] == 1
    assert found[("pg_distlock_sweep_recovered_total", ())] == 1
    assert found[("pg_distlock_queue_jobs", (("queue", "mail"), ("status", "pending")))] == 2
    assert found[("pg_distlock_queue_jobs", (("queue", "mail"), ("status", "dead")))] == 1
    assert found[("pg_distlock_queue_completed_last_hour", (("queue", "images"),))] == 1
    assert found[("pg_distlock_queue_wait_seconds_bucket", (("le", "2.5"), ("queue", "images")))] == 0
    assert found[("pg_distlock_queue_wait_seconds_bucket", (("le", "5"), ("queue", "images")))] == 1
    assert found[("pg_distlock_queue_wait_seconds_bucket", (("le", "+Inf"), ("queue", "images")))] == 1
    assert found[("pg_distlock_lock_holders", (("lock", "orders"),))] == 1
    assert found[("pg_distlock_sessions_waiting", ())] == 1
    assert found[("pg_distlock_leases_held", (("kind", "lease"),))] == 1
    assert found[("pg_distlock_leases_held", (("kind", "semaphore"),))] == 1
    term = db.value("SELECT term FROM distlock.leaders WHERE group_name = 'planner'")
    assert found[("pg_distlock_leader_term", (("group", "planner"),))] == term
    assert found[("pg_distlock_leader_info", (("group", "planner"), ("leader", "node-a")))] == 1
    # The wait that ended counts once the waiter got the lock.
    with console(db.dsn) as (client, _):
        after = parse(client.get("/metrics").text)
    assert after[("pg_distlock_lock_waits_total", (("lock", "orders"),))] == 1
    assert after[("pg_distlock_lock_acquisitions_total", (("lock", "orders"),))] == 2


def test_a_monitor_scrapes_everything_and_a_stranger_nothing(db: Db, monitor_role: str) -> None:
    activity(db)
    with console(f"{db.dsn} user={monitor_role}") as (client, _):
        found = parse(client.get("/metrics").text)
    assert found[("pg_distlock_scrape_errors", ())] == 0
    assert found[("pg_distlock_task_releases_total", (("status", "completed"),))] == 1
    db.admin.execute("CREATE ROLE stranger_metrics LOGIN")
    try:
        code, out = cli(db, "metrics", dsn=f"{db.dsn} user=stranger_metrics")
        assert code == 0
        found = parse(out)
        assert found[("pg_distlock_up", ())] == 1
        assert found[("pg_distlock_scrape_errors", ())] > 0
        assert not any(name.startswith("pg_distlock_task") for name, _ in found)
    finally:
        db.admin.execute("DROP ROLE stranger_metrics")


def test_the_collector_file_is_one_sql_exporter_reads() -> None:
    """The shape burningalchemist/sql_exporter expects of a collector file,
    and Prometheus' naming rules."""
    path = os.path.join(os.path.dirname(metrics.__file__), metrics.COLLECTOR_FILE)
    with open(path, encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    assert spec["collector_name"] == "pg_distlock"
    queries = {q["query_name"] for q in spec["queries"]}
    names = [m["metric_name"] for m in spec["metrics"]]
    assert len(names) == len(set(names))
    for metric in spec["metrics"]:
        assert set(metric) <= {"metric_name", "type", "help", "key_labels", "value_label", "values", "query_ref"}
        assert metric["query_ref"] in queries and metric["values"] and metric["help"]
        assert re.fullmatch(r"pg_distlock_[a-z_]+", metric["metric_name"])
        assert metric["type"] in ("counter", "gauge")
        assert metric["metric_name"].endswith("_total") == (metric["type"] == "counter")
    assert queries == {m["query_ref"] for m in spec["metrics"]}, "every query feeds a metric"


@pytest.fixture
def prometheus_dir() -> Iterator[str]:
    path = tempfile.mkdtemp(prefix="pg_distlock_prometheus_")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def promql(port: int, query: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=5) as response:
        answer = json.load(response)
    assert answer["status"] == "success", answer
    return list(answer["data"]["result"])


@contextlib.contextmanager
def prometheus(db: Db, directory: str, rules: str = "") -> Iterator[int]:
    """`pg-distlock metrics --listen` scraped each second by a Prometheus
    server (evaluating `rules`, a rule file's text, each second), until it
    has scraped once; yields the server's port."""
    exporter_port, prometheus_port = free_port(), free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "pg_distlock", "--dsn", db.dsn, "metrics", "--listen", f"127.0.0.1:{exporter_port}"],
        stderr=subprocess.PIPE, text=True)
    config = os.path.join(directory, "prometheus.yml")
    with open(config, "w", encoding="utf-8") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n")
        if rules:
            with open(os.path.join(directory, "rules.yml"), "w", encoding="utf-8") as r:
                r.write(rules)
            f.write(f"rule_files: ['{directory}/rules.yml']\n")
        f.write("scrape_configs:\n"
                f"  - job_name: pg_distlock\n    static_configs:\n      - targets: ['127.0.0.1:{exporter_port}']\n")
    server = subprocess.Popen(
        [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={directory}/data",
         f"--web.listen-address=127.0.0.1:{prometheus_port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def scraped() -> bool:
            try:
                return bool(promql(prometheus_port, 'up{job="pg_distlock"} == 1'))
            except OSError:
                return False
        eventually(scraped, timeout=60, what="Prometheus to scrape the exporter")
        yield prometheus_port
    finally:
        server.terminate()
        exporter.terminate()
        server.wait(timeout=20)
        exporter.wait(timeout=10)
    assert exporter.stderr is not None
    assert f"http://127.0.0.1:{exporter_port}/metrics" in exporter.stderr.read()


def test_prometheus_scrapes_the_exporter_and_answers_promql(db: Db, prometheus_dir: str) -> None:
    activity(db)
    with prometheus(db, prometheus_dir) as port:
        completed = promql(port, 'sum(pg_distlock_task_releases_total{status="completed"})')
        assert float(completed[0]["value"][1]) == 1
        dead = promql(port, 'pg_distlock_queue_jobs{queue="mail", status="dead"}')
        assert float(dead[0]["value"][1]) == 1
        # The last hour's waits of queue images: one job, 3 s: its median lies in the 2.5-5 s bucket.
        median = promql(port, 'histogram_quantile(0.5, pg_distlock_queue_wait_seconds_bucket{queue="images"})')
        assert 2.5 <= float(median[0]["value"][1]) <= 5


def documented_alert(comment: str) -> str:
    """The PromQL that docs/metrics.md's "Queries worth alerting on" gives
    under `# <comment>`: the test checks what users copy."""
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "metrics.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    return lines[lines.index(f"# {comment}") + 1]


def test_the_documented_alert_fires_for_a_worker_killed_with_its_lease_mode_claim(
        db: Db, prometheus_dir: str) -> None:
    """A worker killed with kill -9 while it holds a lease-mode claim (the
    Python client's default): once its lease has run out and the next worker
    took the task over, the documented alert on failing task runs fires in a
    real Prometheus."""
    (task,) = db.add_tasks(1, "nightly")
    alert = documented_alert("Failing task runs.")
    rules = ("groups:\n  - name: pg_distlock\n    rules:\n      - alert: TaskRunsFailing\n"
             f"        expr: {json.dumps(alert)}\n")
    with prometheus(db, prometheus_dir, rules) as port:
        def firing() -> list[dict[str, Any]]:
            url = f"http://127.0.0.1:{port}/api/v1/alerts"
            with urllib.request.urlopen(url, timeout=5) as response:
                alerts = json.load(response)["data"]["alerts"]
            return [a for a in alerts if a["labels"]["alertname"] == "TaskRunsFailing" and a["state"] == "firing"]
        # The counter is scraped at zero first, so the increase is seen as one.
        eventually(lambda: promql(port, 'pg_distlock_task_releases_total{status="abandoned"} == 0'),
                   timeout=30, what="the abandoned-runs counter at zero")
        worker = lease_worker(db.dsn, task, "2 seconds")
        worker.kill()
        worker.wait()
        assert not firing()
        # The next worker takes the task over once the lease ran out (0.3.0
        # counted that nowhere; the sweep's recovery it did count).
        eventually(lambda: db.value("SELECT distlock.try_acquire_task_lease(%s, 'next', '1 minute')", task),
                   timeout=15, what="the next worker to take the task over once the lease ran out")
        alerts = eventually(firing, timeout=30, what="the alert to fire")
        assert isinstance(alerts, list) and alerts[0]["labels"]["status"] == "abandoned"


def test_listen_wants_a_free_port(db: Db) -> None:
    process = subprocess.run([sys.executable, "-m", "pg_distlock", "--dsn", db.dsn, "metrics", "--listen", "nowhere"],
                             capture_output=True, text=True, timeout=30)
    assert process.returncode == 2 and "--listen wants [HOST:]PORT" in process.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        process = subprocess.run([sys.executable, "-m", "pg_distlock", "--dsn", db.dsn, "metrics",
                                  "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=30)
    assert process.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in process.stderr


def test_a_database_that_does_not_answer_is_reported_down(db: Db) -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        code, out = cli(db, "metrics", dsn=f"host=127.0.0.1 port={port} dbname=postgres")
    assert code == 0
    assert parse(out)[("pg_distlock_up", ())] == 0


def test_a_view_without_shared_memory_gives_no_samples_and_no_error(db: Db) -> None:
    """distlock.lock_stats raises 55000 in table mode: nothing to count, not a
    failed scrape; any other error leaves the metric out as an error."""
    db.admin.execute("""CREATE FUNCTION pg_temp.fails(code text) RETURNS int LANGUAGE plpgsql
                        AS $$ BEGIN RAISE EXCEPTION 'no' USING ERRCODE = code; END $$""")

    def rows(code: str) -> object:
        definition = metrics.Definition("pg_distlock_x", "gauge", "x", f"SELECT pg_temp.fails('{code}') AS v",
                                        (), ("v",), None)
        return metrics.DatabaseCollector._rows(db.admin, definition)

    assert rows("55000") == []
    assert rows("42501") is None
