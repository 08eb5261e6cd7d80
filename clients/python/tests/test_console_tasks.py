"""The console's tasks: /tasks lists every task, /tasks/<id> shows one
(its definition, next runs and, to admins, its runs page by page), and the
admin actions on a task (run now, enable, disable) behind the confirmation."""

from __future__ import annotations

import html
import re
from datetime import datetime
import httpx

from conftest import Db, connect
from pg_distlock.inspect.durations import duration
from test_console import console, post, row_cells, text_of

EVIL = "<script>alert(1)</script>"


def enabled(db: Db, task: int) -> object:
    return db.value("SELECT is_enabled FROM distlock.scheduled_tasks WHERE id = %s", task)


def test_disable_enable_and_run_now_ask_first_then_change_the_task(db: Db) -> None:
    task = db.add_tasks(1, "nightly")[0]
    db.admin.execute("UPDATE distlock.scheduled_tasks SET next_run_at = now() + interval '1 day' WHERE id = %s",
                     (task,))
    with console(db.dsn) as (client, token):
        asked = post(client, "disable-task", token=token, task_id=task, back="/")
        assert asked.status_code == 200
        assert text_of(asked.text, "question").startswith(f"Disable task {task} 'nightly-1'? Workers stop claiming it")
        assert enabled(db, task) is True
        done = post(client, "disable-task", token=token, task_id=task, back="/", confirmed="yes")
        assert done.status_code == 303 and done.headers["location"] == "/?done=disable-task&n=1"
        assert enabled(db, task) is False
        assert "disable-task: done" in client.get(done.headers["location"]).text
        again = post(client, "disable-task", token=token, task_id=task, back="/", confirmed="yes")
        assert again.headers["location"] == "/?done=disable-task&n=0", "nothing to do"

        asked = post(client, "enable-task", token=token, task_id=task, back="/")
        assert text_of(asked.text, "question").startswith(f"Enable task {task} 'nightly-1'? Workers claim it from")
        assert post(client, "enable-task", token=token, task_id=task, back="/", confirmed="yes").status_code == 303
        assert enabled(db, task) is True

        asked = post(client, "run-now", token=token, task_id=task, back="/")
        assert text_of(asked.text, "question") == f"Run task {task} now? Its schedule stays as it is."
        done = post(client, "run-now", token=token, task_id=task, back="/", confirmed="yes")
        assert done.headers["location"] == "/?done=run-now&n=1"
        assert db.value("SELECT next_run_at <= now() FROM distlock.scheduled_tasks WHERE id = %s", task) is True

        for garbage in ("abc", "-1", "2147483648", "9" * 5000, "", "1e3"):
            refused = post(client, "disable-task", token=token, task_id=garbage, back="/", confirmed="yes")
            assert refused.status_code == 400, (garbage[:20], refused.status_code)
        unknown = post(client, "disable-task", token=token, task_id=task + 1, back="/", confirmed="yes")
        assert unknown.status_code == 400 and f"no task {task + 1}" in unknown.text
    assert enabled(db, task) is True



def cron_task(db: Db, name: str, cron: str) -> int:
    return int(db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron)"  # type: ignore[arg-type]
                        " VALUES (%s, 'test', %s) RETURNING id", name, cron))


def moment(value: datetime) -> str:
    return value.isoformat(sep=" ", timespec="seconds")


def runs_on(page: str) -> list[int]:
    return [int(run) for run in re.findall(r'<tr data-run="(\d+)"', page)]


def link(page: str, element_id: str) -> str:
    found = re.search(rf'<a href="([^"]*)" id="{element_id}"', page)
    assert found, f"no link {element_id}"
    return html.unescape(found.group(1))


def forms(page: str) -> dict[str, dict[str, str]]:
    """The page's action forms, by command: their hidden fields."""
    found = {}
    for command, body in re.findall(r'<form method="post" action="/actions/([a-z-]+)" class="action">(.*?)</form>',
                                    page, re.S):
        found[command] = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', body))
    return found


def test_the_task_list_shows_every_task_its_claim_and_the_overdue_ones(db: Db) -> None:
    late, idle, off, busy = db.add_tasks(4, "job")
    db.admin.execute("UPDATE distlock.scheduled_tasks SET next_run_at = now() + CASE id WHEN %s THEN interval '-10 minutes'"
                     " WHEN %s THEN interval '-10 minutes' ELSE interval '1 hour' END, is_enabled = (id <> %s)"
                     " WHERE task_name LIKE 'job-%%'", (late, off, off))
    worker = connect(db.dsn)
    try:
        token = worker.execute("SELECT distlock.try_acquire_task_lease(%s, 'w-busy', '1 minute')", (busy,)).fetchone()
        assert token is not None
        with console(db.dsn) as (client, _):
            page = client.get("/tasks").text
            assert '<a href="/tasks"' in page and ">Tasks</a>" in page, "in the navigation"
            assert len(re.findall(r'<tr data-task="job-\d"', page)) == 4
            cells = row_cells(page, "data-task", "job-1")
            assert cells[:4] == ["job-1", "test", "0 0 1 1 *", "yes"] and "overdue" in cells[4]
            assert f'<a href="/tasks/{late}">job-1</a>' in page
            assert "overdue" not in row_cells(page, "data-task", "job-2")[4], "due in an hour"
            disabled = row_cells(page, "data-task", "job-3")
            assert disabled[3] == "no" and "overdue" not in disabled[4], "a disabled task is not overdue"
            claimed = row_cells(page, "data-task", "job-4")
            assert claimed[8:10] == ["w-busy", str(token[0])] and claimed[11] == "alive"
            assert idle
    finally:
        worker.close()


def history(db: Db, task: int, runs: int) -> None:
    """`runs` finished runs of `task`, the i-th started i minutes ago and
    lasting i seconds (the odd ones failed), then one real failed run."""
    db.admin.execute(
        "INSERT INTO distlock.task_execution_log (task_id, worker_id, status, started_at, completed_at, error_message,"
        " fencing_token, attempt)"
        " SELECT %s, 'w-' || i, CASE WHEN i %% 2 = 1 THEN 'failed' ELSE 'completed' END,"
        "        now() - i * interval '1 minute', now() - i * interval '1 minute' + i * interval '1 second',"
        "        CASE WHEN i %% 2 = 1 THEN 'error ' || i END, 1000 + i, 1 + i %% 3"
        "   FROM generate_series(%s, 1, -1) AS i", (task, runs))
    worker = connect(db.dsn)
    try:
        assert worker.execute("SELECT distlock.try_acquire_task_lock(%s, %s)", (task, EVIL)).fetchone() == (True,)
        worker.execute("SELECT distlock.release_task_lock(%s, %s, 'failed', %s)", (task, EVIL, EVIL))
    finally:
        worker.close()


def test_a_task_page_shows_its_definition_next_runs_and_its_runs_page_by_page(db: Db) -> None:
    task = cron_task(db, "report-1", "0 3 * * *")
    history(db, task, 55)
    log = db.rows("SELECT id, status, started_at, completed_at, worker_id, fencing_token, attempt, error_message"
                  " FROM distlock.task_execution_log WHERE task_id = %s ORDER BY id DESC", task)
    assert len(log) == 56

    def next_runs() -> list[str]:
        slots, after = [], db.value("SELECT now()")
        for _ in range(5):
            after = db.value("SELECT distlock.cron_next('0 3 * * *', %s)", after)
            slots.append(moment(db.value("SELECT timezone('UTC', %s::timestamptz)", after)) + " UTC")  # type: ignore[arg-type]
        return slots

    with console(db.dsn) as (client, token):
        expected = next_runs()
        page = client.get(f"/tasks/{task}").text
        assert text_of(page, "task-name") == "report-1" and text_of(page, "task-enabled") == "yes"
        assert "<code>0 3 * * *</code>" in page and "<dt>retries</dt><dd>3, the first after 10.0 s" in page
        shown = re.findall(r"<li>([^<]*)</li>", re.search(r'id="next-runs">(.*?)</section>', page, re.S).group(1))  # type: ignore[union-attr]
        assert shown in (expected, next_runs()), "cron_next applied five times from now"

        first = runs_on(page)
        assert first == [row[0] for row in log[:50]], "the newest 50, newest first"
        real = row_cells(page, "data-run", str(log[0][0]))
        assert real[4:6] == ["failed", EVIL] and real[8] == EVIL, "the real run, its worker and error as text"
        for row in log[1:50]:
            cells = row_cells(page, "data-run", str(row[0]))
            assert cells[1:3] == [moment(row[2]), moment(row[3])]
            assert cells[3] == duration(row[3] - row[2])
            assert cells[4:8] == [row[1], row[4], str(row[5]), str(row[6])] and cells[8] == (row[7] or "")
        assert row_cells(page, "data-run", str(log[1][0]))[3:5] == ["1.0 s", "failed"], "the newest inserted run"
        assert row_cells(page, "data-run", str(log[2][0]))[3:5] == ["2.0 s", "completed"]
        assert 'id="newest-runs"' not in page

        older = client.get(link(page, "older-runs"))
        assert older.status_code == 200 and runs_on(older.text) == [row[0] for row in log[50:]]
        assert 'id="older-runs"' not in older.text and link(older.text, "newest-runs") == f"/tasks/{task}"
        assert runs_on(client.get(f"/tasks/{task}", params={"before": log[-1][0]}).text) == []

        part = client.get(f"/tasks/{task}", params={"part": "main", "before": log[49][0]})
        assert part.status_code == 200 and "<html" not in part.text and runs_on(part.text) == [r[0] for r in log[50:]]
        assert 'data-refresh="5"' in page, "the page refreshes itself"
        assert set(forms(page)) == {"run-now", "disable-task"} and forms(page)["disable-task"]["task_id"] == str(task)
        assert token


def test_a_zoned_task_page_shows_its_times_on_the_zones_wall_clock(db: Db) -> None:
    task = int(db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, schedule_timezone)"  # type: ignore[arg-type]
                        " VALUES ('berlin-1', 'test', '0 3 * * *', 'Europe/Berlin') RETURNING id"))
    with console(db.dsn) as (client, _token):
        page = client.get(f"/tasks/{task}").text
    assert text_of(page, "task-timezone") == "Europe/Berlin"
    shown = re.findall(r"<li>([^<]*)</li>", re.search(r'id="next-runs">(.*?)</section>', page, re.S).group(1))  # type: ignore[union-attr]
    assert len(shown) == 5 and all(slot.endswith(" 03:00:00 Europe/Berlin") for slot in shown), shown
    next_local = db.value("SELECT timezone('Europe/Berlin', next_run_at) FROM distlock.scheduled_tasks WHERE id = %s", task)
    assert text_of(page, "task-next-run") == moment(next_local) + " Europe/Berlin"  # type: ignore[arg-type]


def test_a_task_page_shows_its_missed_run_policy_and_its_skipped_slots(db: Db) -> None:
    task = int(db.value(  # type: ignore[arg-type]
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at, missed_runs,"
        " missed_runs_grace) VALUES ('late-report', 'test', 'every 10 minutes',"
        " distlock.cron_next('every 10 minutes', now() - interval '1 hour'), 'skip', interval '15 minutes') RETURNING id"))
    fetched = db.value("SELECT task_id FROM distlock.worker_fetch_and_execute_task('w1') WHERE acquired")
    assert fetched == task
    with console(db.dsn) as (client, _token):
        page = client.get(f"/tasks/{task}").text
    assert text_of(page, "task-missed-runs") == "skipped when older than 15m 00s (missed_runs skip)"
    skipped = db.value("SELECT runs_skipped FROM distlock.task_schedule WHERE task_id = %s", task)
    assert skipped is not None and int(skipped) >= 4  # type: ignore[call-overload]
    assert text_of(page, "task-runs-skipped") == f"{skipped} slots skipped"
    rows = re.findall(r'<tr data-run="\d+" class="skipped">', page)
    assert len(rows) == skipped, "each skipped slot is a row of the run history"


def test_the_task_pages_buttons_disable_enable_and_run_the_task(db: Db) -> None:
    task = db.add_tasks(1, "report")[0]
    db.admin.execute("UPDATE distlock.scheduled_tasks SET next_run_at = now() + interval '1 day' WHERE id = %s",
                     (task,))

    def press(client: httpx.Client, command: str) -> str:
        fields = forms(client.get(f"/tasks/{task}").text)[command]
        asked = client.post(f"/actions/{command}", data=fields)
        assert asked.status_code == 200 and f"task {task}" in text_of(asked.text, "question")
        done = client.post(f"/actions/{command}", data={**fields, "confirmed": "yes"})
        assert done.status_code == 303 and done.headers["location"].startswith(f"/tasks/{task}?done={command}")
        return client.get(done.headers["location"]).text

    with console(db.dsn) as (client, _):
        page = press(client, "disable-task")
        assert "disable-task: done" in page and text_of(page, "task-enabled") == "no"
        assert set(forms(page)) == {"enable-task"}, "a disabled task can be enabled, not run"
        assert db.value("SELECT is_enabled FROM distlock.scheduled_tasks WHERE id = %s", task) is False
        page = press(client, "enable-task")
        assert "enable-task: done" in page and text_of(page, "task-enabled") == "yes"
        page = press(client, "run-now")
        assert "run-now: done" in page
        assert db.value("SELECT next_run_at <= now() FROM distlock.scheduled_tasks WHERE id = %s", task) is True


def test_a_monitor_sees_a_task_but_not_its_runs_and_may_not_act(db: Db, monitor_role: str) -> None:
    task = cron_task(db, "report-1", "@daily")
    history(db, task, 3)
    with console(f"{db.dsn} user={monitor_role}") as (client, token):
        listed = client.get("/tasks")
        assert listed.status_code == 200 and "report-1" in listed.text
        page = client.get(f"/tasks/{task}")
        assert page.status_code == 200 and text_of(page.text, "task-name") == "report-1"
        assert text_of(page.text, "mode") == "read-only"
        assert "readable with the admin capability only" in page.text and not runs_on(page.text)
        assert EVIL not in html.unescape(page.text), "no worker id or error from the log"
        assert "<form" not in page.text and "<button" not in page.text and "<dt>retries</dt>" not in page.text
        assert len(re.findall(r"<li>", page.text)) == 5, "the next runs"
        for command in ("disable-task", "enable-task", "run-now"):
            refused = post(client, command, token=token, task_id=task, back=f"/tasks/{task}", confirmed="yes")
            assert refused.status_code == 403, command
    assert db.value("SELECT is_enabled FROM distlock.scheduled_tasks WHERE id = %s", task) is True


def test_task_paths_answer_404_for_no_task_and_never_500(db: Db) -> None:
    task = db.add_tasks(1, "report")[0]
    with console(db.dsn) as (client, _):
        assert client.get(f"/tasks/{task}").status_code == 200
        for path in ("/tasks/" + "9" * 10_000, "/tasks/2147483648", "/tasks/9223372036854775808", "/tasks/abc",
                     "/tasks/-1", "/tasks/0", "/tasks/%E2%91%A0", "/tasks/1e3", f"/tasks/{task + 1}",
                     f"/tasks/{task + 1}?part=main"):
            response = client.get(path)
            assert response.status_code == 404, (path[:40], response.status_code)
            assert response.headers["content-security-policy"].startswith("default-src 'self'")
        for before in ("abc", "-1", "9" * 100, ""):
            assert client.get(f"/tasks/{task}", params={"before": before}).status_code == 400, before


def test_hostile_task_names_types_and_workers_show_as_text(db: Db) -> None:
    task = db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)"
                    " VALUES (%s, %s, '@hourly', now() - interval '1 hour') RETURNING id", EVIL, EVIL + "type")
    worker = connect(db.dsn)
    try:
        assert worker.execute("SELECT distlock.try_acquire_task_lock(%s, %s)", (task, EVIL)).fetchone() == (True,)
        with console(db.dsn) as (client, token):
            for path in ("/tasks", f"/tasks/{task}", "/tasks?part=main", f"/tasks/{task}?part=main"):
                response = client.get(path)
                assert response.status_code == 200, path
                assert "<script>" not in response.text, path
                assert response.text.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 2, path
            asked = post(client, "disable-task", token=token, task_id=task, back=f"/tasks/{task}")
            assert "<script>" not in asked.text and EVIL in text_of(asked.text, "question")
    finally:
        worker.close()

