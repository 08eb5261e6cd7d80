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
    # It has been runnable for 3 s when it is claimed.
    db.admin.execute("UPDATE distlock.task_queue SET created_at = created_at - interval '3 seconds', "
                     "run_after = run_after - interval '3 seconds' WHERE id = %s", (job,))
    db.value("SELECT distlock.complete_task(task_id, 'w') FROM distlock.consume_task('w', p_queues => ARRAY['images'])")
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
    # The cumulative counters (shared memory: the test clusters preload pg_distlock).
    jobs = {outcome: found[("pg_distlock_queue_jobs_total", (("outcome", outcome), ("queue", "mail")))]
            for outcome in ("claimed", "completed", "failed", "dead", "taken_over", "expired")}
    assert jobs == {"claimed": 1, "completed": 0, "failed": 0, "dead": 1, "taken_over": 0, "expired": 0}
    assert found[("pg_distlock_queue_jobs_total", (("outcome", "completed"), ("queue", "images")))] == 1
    assert found[("pg_distlock_queue_wait_seconds_bucket", (("le", "2.5"), ("queue", "images")))] == 0
    assert found[("pg_distlock_queue_wait_seconds_bucket", (("le", "5.0"), ("queue", "images")))] == 1
    assert found[("pg_distlock_queue_wait_seconds_bucket", (("le", "+Inf"), ("queue", "images")))] == 1
    assert found[("pg_distlock_queue_wait_seconds_count", (("queue", "images"),))] == 1
    assert 3 <= found[("pg_distlock_queue_wait_seconds_sum", (("queue", "images"),))] < 4
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
    histogram_parts = {d.name for parts in metrics.histograms(metrics.definitions()).values() for d in parts.values()}
    assert histogram_parts == {f"pg_distlock_queue_wait_seconds{s}" for s in ("_bucket", "_sum", "_count")}
    for metric in spec["metrics"]:
        assert set(metric) <= {"metric_name", "type", "help", "key_labels", "value_label", "values", "query_ref"}
        assert metric["query_ref"] in queries and metric["values"] and metric["help"]
        assert re.fullmatch(r"pg_distlock_[a-z_]+", metric["metric_name"])
        assert metric["type"] in ("counter", "gauge")
        if metric["metric_name"] in histogram_parts:
            # A histogram's parts, as sql_exporter must spell them: counters.
            assert metric["type"] == "counter"
            continue
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
        # The waits of queue images: one job, 3 s: its median lies in the 2.5-5 s bucket.
        median = promql(port, 'histogram_quantile(0.5, pg_distlock_queue_wait_seconds_bucket{queue="images"})')
        assert 2.5 <= float(median[0]["value"][1]) <= 5
        claimed = promql(port, 'pg_distlock_queue_jobs_total{queue="images", outcome="claimed"}')
        assert float(claimed[0]["value"][1]) == 1


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


PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
OPENMETRICS_FIRST = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"


def queue_states(db: Db) -> None:
    """Jobs in every state and every counted outcome: pending, processing,
    failed (to be retried), dead, completed, taken over, expired."""
    dead_job(db, "states")
    db.value("SELECT distlock.enqueue_task('send', '{}', p_queue => 'states')")  # pending
    for _ in range(4):
        db.value("SELECT distlock.enqueue_task('send', '{}', p_queue => 'states')")
    claimed = [r[0] for r in db.rows("SELECT task_id FROM distlock.consume_tasks(4, 'w', '1 hour', NULL, ARRAY['states'])")]
    db.value("SELECT distlock.complete_task(%s, 'w')", claimed[0])
    db.value("SELECT distlock.fail_task(%s, 'again', 'w')", claimed[1])  # failed, to be retried
    # Two leases run out: one taken over by a claim, one put back by the sweep.
    db.admin.execute("UPDATE distlock.task_queue SET lease_expires_at = now() - interval '1 second' "
                     "WHERE id = ANY(%s)", (claimed[2:],))
    assert db.value("SELECT count(*) FROM distlock.consume_tasks(1, 'x', '1 hour', NULL, ARRAY['states'])") == 1
    db.value("SELECT count(*) FROM distlock.check_and_recover_timeout_tasks()")
    # A queue name that needs escaping in a label.
    db.value("SELECT distlock.enqueue_task('send', '{}', p_queue => 'a \"quoted\" \\ queue')")


def promtool_check(text: str) -> None:
    process = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert process.returncode == 0, f"promtool check metrics: {process.stdout}{process.stderr}\n{text}"


@pytest.mark.skipif(not os.path.exists(PROMTOOL), reason="promtool is not installed (Debian package prometheus)")
def test_promtool_accepts_the_exporters_and_the_consoles_metrics(db: Db) -> None:
    activity(db)
    queue_states(db)
    code, printed = cli(db, "metrics")
    assert code == 0
    found = parse(printed)
    assert found[("pg_distlock_scrape_errors", ())] == 0
    states = {o: found[("pg_distlock_queue_jobs_total", (("outcome", o), ("queue", "states")))]
              for o in ("claimed", "completed", "failed", "dead", "taken_over", "expired")}
    assert states == {"claimed": 6, "completed": 1, "failed": 1, "dead": 1, "taken_over": 1, "expired": 1}, states
    assert "# TYPE pg_distlock_queue_wait_seconds histogram" in printed
    assert "# TYPE pg_distlock_queue_jobs_total counter" in printed
    bounds = [float(m) for m in re.findall(r'pg_distlock_queue_wait_seconds_bucket\{le="([^"]+)",queue="states"\}', printed)]
    assert bounds == sorted(bounds) and bounds[-1] == float("inf") and len(bounds) == 17, bounds
    promtool_check(printed)
    # The exporter's and the console's /metrics: the same Content-Type, and
    # both pass, also for a scraper that asks for OpenMetrics first (as
    # Prometheus does).
    from prometheus_client import CONTENT_TYPE_LATEST
    port = free_port()
    exporter = subprocess.Popen(
        [sys.executable, "-m", "pg_distlock", "--dsn", db.dsn, "metrics", "--listen", f"127.0.0.1:{port}"],
        stderr=subprocess.PIPE, text=True)
    try:
        def scrape() -> Any:
            try:
                return urllib.request.urlopen(urllib.request.Request(
                    f"http://127.0.0.1:{port}/metrics", headers={"Accept": OPENMETRICS_FIRST}), timeout=5)
            except OSError:
                return None
        response = eventually(scrape, timeout=30, what="the exporter to listen")
        served_type = response.headers["Content-Type"]
        promtool_check(response.read().decode())
    finally:
        exporter.terminate()
        exporter.wait(timeout=10)
    with console(db.dsn) as (client, _):
        page = client.get("/metrics", headers={"Accept": OPENMETRICS_FIRST})
    assert served_type == page.headers["content-type"] == CONTENT_TYPE_LATEST
    promtool_check(page.text)


def counters_of(db: Db, queue: str) -> tuple[int, ...]:
    row = db.rows("SELECT claimed, completed, failed, dead, wait_count FROM distlock.queue_counters() WHERE queue = %s",
                  queue)
    return tuple(row[0]) if row else (0, 0, 0, 0, 0)


def test_the_counters_count_committed_work_seen_from_another_session(db: Db) -> None:
    """A consumer's claims and completions show in another session's scrape
    once committed, not before; a rolled-back transaction and a savepoint
    rolled back leave nothing; retrying a dead job and pruning lower nothing."""
    consumer = connect(db.dsn)
    try:
        job = db.value("SELECT distlock.enqueue_task('send', '{}', p_queue => 'committed')")
        with consumer.transaction():
            with contextlib.suppress(RuntimeError):
                with consumer.transaction():  # a savepoint
                    consumer.execute("SELECT * FROM distlock.consume_task('c', p_queues => ARRAY['committed'])")
                    raise RuntimeError("roll back to the savepoint")
            assert counters_of(db, "committed") == (0, 0, 0, 0, 0)
            claimed = consumer.execute(
                "SELECT task_id FROM distlock.consume_task('c', p_queues => ARRAY['committed'])").fetchone()
            assert claimed == (job,)
            assert counters_of(db, "committed") == (0, 0, 0, 0, 0), "not before its commit"
        assert counters_of(db, "committed") == (1, 0, 0, 0, 1)
        consumer.execute("BEGIN")
        consumer.execute("SELECT distlock.complete_task(%s, 'c')", (job,))
        consumer.execute("ROLLBACK")
        consumer.execute("SELECT distlock.complete_task(%s, 'c')", (job,))
        assert counters_of(db, "committed") == (1, 1, 0, 0, 1)
        dead = dead_job(db, "committed")
        before = counters_of(db, "committed")
        assert before == (2, 1, 0, 1, 2)
        db.value("SELECT distlock.retry_dead_jobs('committed', ARRAY[%s]::bigint[])", dead)
        db.value("SELECT distlock.prune_jobs('0 seconds')")
        assert counters_of(db, "committed") == before
    finally:
        consumer.close()


def test_the_grafana_dashboard_uses_only_series_the_exporter_serves() -> None:
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs", "grafana", "pg_distlock.json")
    with open(path, encoding="utf-8") as f:
        dashboard = json.load(f)
    served = {"pg_distlock_up", "pg_distlock_scrape_errors"}
    for definition in metrics.definitions():
        served.add(definition.name)
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used = {name for expr in exprs for name in re.findall(r"pg_distlock_[a-z_]+", expr)}
    assert used and used <= served, f"not served: {used - served}"
    assert {"pg_distlock_queue_jobs_total", "pg_distlock_queue_wait_seconds_bucket"} <= used
