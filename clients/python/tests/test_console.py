"""The web console (`pg-distlock console`), served by uvicorn on a real port
against a database with real activity: what it shows, that it escapes what
it shows, who may act, and what it takes from the database."""

from __future__ import annotations

import contextlib
import html
import re
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator

import httpx
import uvicorn

from conftest import Db, connect, eventually, free_port, lock_wait_chain
from pg_distlock.console import create_app
from pg_distlock.console.graph import layout
from test_cli import dead_job


@contextlib.contextmanager
def console(dsn: str, pool_size: int = 2) -> Iterator[tuple[httpx.Client, str]]:
    """A console on a free loopback port; a client for it and its form token."""
    app = create_app(dsn, pool_size)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    eventually(lambda: server.started, what="the console to start")
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=20) as client:
            yield client, app.state.console.token
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def text_of(page: str, element_id: str) -> str:
    found = re.search(rf'id="{element_id}"[^>]*>(.*?)</', page, re.S)
    assert found, f"no element {element_id}"
    return html.unescape(found.group(1)).strip()


def row_cells(page: str, attribute: str, value: str) -> list[str]:
    row = re.search(rf'<tr[^>]*{attribute}="{re.escape(html.escape(value))}"[^>]*>(.*?)</tr>', page, re.S)
    assert row, f"no row {attribute}={value}"
    return [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row.group(1), re.S)]


def post(client: httpx.Client, command: str, **form: Any) -> httpx.Response:
    return client.post(f"/actions/{command}", data={k: str(v) for k, v in form.items()})


def test_the_overview_shows_what_the_views_give(db: Db) -> None:
    dead = dead_job(db, "mail")
    for _ in range(3):
        db.value("SELECT distlock.enqueue_task('send', '{}', p_queue => 'mail')")
    done = db.value("SELECT distlock.enqueue_task('resize', '{}', p_queue => 'images')")
    db.value("SELECT distlock.complete_task(task_id, 'w') FROM distlock.consume_task('w', p_queues => ARRAY['images'])")
    db.add_tasks(1, "report")
    worker = connect(db.dsn)
    token = worker.execute("SELECT fencing_token FROM distlock.worker_fetch_and_execute_task('w1')").fetchone()
    assert token is not None
    try:
        with console(db.dsn) as (client, _):
            page = client.get("/").text
            view = db.rows("SELECT pending, processing, failed, dead, completed_last_hour FROM distlock.queues"
                           " WHERE name = 'mail'")[0]
            cells = row_cells(page, "data-queue", "mail")
            assert [int(c.replace(",", "")) for c in cells[3:8]] == list(view) == [3, 0, 0, 1, 0]
            assert row_cells(page, "data-queue", "images")[7] == "1"
            assert text_of(page, "count-pending") == "3" and text_of(page, "count-dead") == "1"
            assert text_of(page, "count-claims") == "1"
            claim = row_cells(page, "data-task", "report-1")
            assert claim[1] == "w1" and claim[2] == str(token[0])
            assert f'href="/jobs/{dead}"' in page, "an admin sees the dead job"
            assert done is not None and 'class="completed"' in page, "the last hour's completion is charted"
            # The refresh asks for <main> alone.
            part = client.get("/", params={"part": "main"}).text
            assert part.lstrip().startswith("<section") and "<html" not in part
    finally:
        worker.close()


def test_names_payloads_and_errors_show_as_text(db: Db) -> None:
    evil = "<script>alert(1)</script>"
    job = db.value("SELECT distlock.enqueue_task(%s, %s::jsonb, now(), 0, 1, %s)",
                   evil, f'{{"html": "{evil}"}}', evil)
    db.value("SELECT task_id FROM distlock.consume_task('w')")
    db.value("SELECT distlock.fail_task(%s, %s, 'w')", job, evil)
    db.add_tasks(1, evil)
    holder = connect(db.dsn + " application_name=x")
    holder.execute("SELECT distlock.lock(%s)", (evil,))
    try:
        with console(db.dsn) as (client, _):
            for path in ("/", f"/jobs/{job}", "/locks", "/?part=main"):
                response = client.get(path)
                assert response.status_code == 200, path
                assert "<script>alert" not in response.text, path
                assert "&lt;script&gt;alert(1)&lt;/script&gt;" in response.text, path
                assert response.headers["content-security-policy"].startswith("default-src 'self'")
            assert '"html": "<script>' in text_of(client.get(f"/jobs/{job}").text, "payload")
    finally:
        holder.close()


def test_a_monitor_sees_no_actions_and_is_refused_one(db: Db, monitor_role: str) -> None:
    job = dead_job(db)
    with console(f"{db.dsn} user={monitor_role}") as (client, token):
        page = client.get("/").text
        assert text_of(page, "mode") == "read-only"
        assert "<form" not in page and "<button" not in page
        assert text_of(page, "count-dead") == "1"
        response = post(client, "retry-dead", token=token, ids=job, confirmed="yes", back="/")
        assert response.status_code == 403
        assert "admin capability" in response.text
        unreadable = client.get(f"/jobs/{job}")
        assert unreadable.status_code == 403 and "needs the admin capability" in unreadable.text
        assert client.get("/jobs/999999999").status_code == 403, "whether a job exists is not said to a monitor"
    assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", job) == "dead"


def test_retrying_a_dead_job_from_the_page_asks_first_then_makes_it_runnable(db: Db) -> None:
    job = dead_job(db)
    with console(db.dsn) as (client, token):
        page = client.get("/").text
        assert text_of(page, "mode") == "admin"
        forms = re.findall(r'<form method="post" action="/actions/retry-dead".*?</form>', page, re.S)
        assert any(f'name="ids" value="{job}"' in form for form in forms), "a retry button on the dead job's row"
        assert post(client, "retry-dead", token="forged", ids=job, back="/").status_code == 403
        asked = post(client, "retry-dead", token=token, ids=job, back="/")
        assert asked.status_code == 200
        assert text_of(asked.text, "question") == f"Retry 1 dead job(s) among ids {job}?"
        assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", job) == "dead"
        done = post(client, "retry-dead", token=token, ids=job, back="/", confirmed="yes")
        assert done.status_code == 303
        assert done.headers["location"].startswith("/?done=retry-dead")
        assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", job) == "pending"
        assert "retry-dead: 1 job(s)" in client.get(done.headers["location"]).text
        assert post(client, "retry-dead", token=token, ids="1; DROP", confirmed="yes").status_code == 400
        assert post(client, "explode", token=token, confirmed="yes").status_code == 400
        away = post(client, "pause", token=token, queue="mail", back="//evil.example/", confirmed="yes")
        assert away.headers["location"].startswith("/?"), "goes back only to the console's own pages"
    assert db.value("SELECT paused FROM distlock.queues WHERE name = 'mail'") is True


def test_the_locks_page_draws_the_wait_chain(db: Db) -> None:
    with lock_wait_chain(db, "orders:42") as holder_pid, console(db.dsn) as (client, _):
        page = eventually(lambda: (p := client.get("/locks").text).count('class="edge') >= 2 and p,
                          what="two waits drawn")
        assert isinstance(page, str)
        assert re.search(rf'<g class="node holder" data-pid="{holder_pid}">', page)
        assert page.count('class="node"') >= 2, "the two waiters"
        assert "Deadlock" not in page
        assert row_cells(page, "data-pid", str(holder_pid))[0] == "orders:42"


def test_a_cycle_of_waits_is_drawn_as_a_deadlock() -> None:
    def edge(blocked: int, blocking: int) -> dict[str, Any]:
        return {"blocked_pid": blocked, "blocking_pid": blocking, "blocked_application": "a",
                "blocking_application": "b", "locktype": "advisory", "lock": "k", "waiting_for": None}

    graph = layout([edge(5, 6), edge(6, 7), edge(7, 5), edge(8, 5)])
    assert graph.cycles == [[5, 6, 7]]
    assert sorted((e.in_cycle) for e in graph.edges) == [False, True, True, True]
    assert {n.pid for n in graph.nodes if n.in_cycle} == {5, 6, 7}
    chain = layout([edge(2, 1), edge(3, 2)])
    x = {n.pid: n.x for n in chain.nodes}
    assert x[1] < x[2] < x[3], "holder left, each waiter right of what it waits for"


def test_the_console_holds_no_transaction_and_no_more_than_its_pool(db: Db) -> None:
    dead_job(db)
    with console(db.dsn, pool_size=2) as (client, _):
        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda path: client.get(path).status_code, ["/", "/locks", "/coordination"] * 8))
        assert set(statuses) == {200}
        sessions = db.rows("SELECT state, xact_start FROM pg_stat_activity"
                           " WHERE application_name = 'pg-distlock console' AND datname = current_database()")
        assert 1 <= len(sessions) <= 2
        assert all(state == "idle" and xact_start is None for state, xact_start in sessions), sessions


def test_only_loopback_host_names_are_answered(db: Db) -> None:
    with console(db.dsn) as (client, _):
        assert client.get("/", headers={"host": "evil.example"}).status_code == 400
        assert client.get("/", headers={"host": "localhost"}).status_code == 200


def test_the_command_starts_the_console(db: Db) -> None:
    import subprocess
    import sys

    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "pg_distlock", "--dsn", db.dsn, "console", "--port", str(port)],
                               stderr=subprocess.PIPE, text=True)
    try:
        def answers() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/coordination", timeout=2).status_code == 200
            except httpx.TransportError:
                return False
        eventually(answers, timeout=20, what="pg-distlock console to answer")
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert process.stderr is not None
    assert f"http://127.0.0.1:{port}/" in process.stderr.read()



def test_a_banner_says_only_what_an_action_did(db: Db) -> None:
    """The success banner comes from fixed texts: a link with ?message=...
    (or a made-up outcome) makes the console say nothing."""
    with console(db.dsn) as (client, _):
        lure = "Your session expired: log in at evil.example"
        page = client.get("/", params={"message": lure}).text
        assert "evil.example" not in page and 'class="message"' not in page
        for query in ({"done": "<b>hi</b>", "n": "1"}, {"done": "pause", "n": "1e9"},
                      {"done": "retry-dead", "n": "9" * 40}, {"done": "retry-dead"}):
            assert 'class="message"' not in client.get("/", params=query).text, query
        said = client.get("/", params={"done": "retry-dead", "n": "3"}).text
        assert '<p class="message" role="status">retry-dead: 3 job(s)</p>' in said
        assert "pause: nothing to do" in client.get("/locks", params={"done": "pause", "n": "0"}).text


def test_job_paths_answer_404_for_no_job_and_never_500(db: Db) -> None:
    job = dead_job(db)
    with console(db.dsn) as (client, _):
        assert client.get(f"/jobs/{job}").status_code == 200
        for path in ("/jobs/" + "9" * 10_000, "/jobs/9223372036854775808", "/jobs/abc", "/jobs/-1",
                     "/jobs/%E2%91%A0", "/jobs/999999999"):
            response = client.get(path)
            assert response.status_code == 404, (path[:40], response.status_code)
            assert response.headers["content-security-policy"].startswith("default-src 'self'")
        assert client.get("/no/such/page").status_code == 404


def test_badges_are_honest_on_every_page(db: Db) -> None:
    job = dead_job(db)
    with console(db.dsn) as (client, token):
        asked = post(client, "retry-dead", token=token, ids=job, back="/")
        assert asked.status_code == 200 and text_of(asked.text, "mode") == "admin", "the confirm page of an admin"
        refused = post(client, "retry-dead", token="forged", ids=job, back="/")
        assert refused.status_code == 403 and 'id="mode"' not in refused.text, "an error page claims no mode"


def test_an_overdue_task_is_flagged(db: Db) -> None:
    db.add_tasks(2, "nightly")
    db.rows("UPDATE distlock.scheduled_tasks SET next_run_at = now() + CASE task_name WHEN 'nightly-1' "
            "THEN interval '-10 minutes' ELSE interval '10 minutes' END WHERE task_name LIKE 'nightly-%%' RETURNING id")
    with console(db.dsn) as (client, _):
        page = client.get("/").text
        late = re.search(r'<tr data-task="nightly-1">.*?</tr>', page, re.S)
        on_time = re.search(r'<tr data-task="nightly-2">.*?</tr>', page, re.S)
        assert late and 'class="overdue"' in late.group(0) and "overdue" in row_cells(page, "data-task", "nightly-1")[3]
        assert on_time and "overdue" not in on_time.group(0)
