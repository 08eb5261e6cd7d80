"""The console's job browser (/jobs): every state, the filters and the
search, keyset pages, bulk actions behind the confirmation, who may read
it, escaping, validation, and the plans of its statements over an archive
of 200,000 completed jobs."""

from __future__ import annotations

import html
import re
from typing import Any, Iterator

import httpx
import pytest

from conftest import Db
from pg_distlock.inspect import jobs
from test_cli import dead_job
from test_console import console, post, row_cells, text_of

EVIL = "<script>alert(1)</script>"


def whole(value: object) -> int:
    assert isinstance(value, int), value
    return value


def enqueue(db: Db, queue: str, name: str = "send", **args: Any) -> int:
    named = "".join(f", p_{key} => %s" for key in args)
    return whole(db.value(f"SELECT distlock.enqueue_task(%s, '{{}}', p_queue => %s{named})", name, queue, *args.values()))


def claim(db: Db, queue: str, worker: str = "w") -> int:
    return whole(db.value("SELECT task_id FROM distlock.consume_task(%s, p_queues => ARRAY[%s])", worker, queue))


def failed_job(db: Db, queue: str, due: bool) -> int:
    """A job whose attempt failed, waiting for its retry (`due`: runnable again already)."""
    job = enqueue(db, queue, max_attempts=3)
    assert claim(db, queue) == job and db.value("SELECT distlock.fail_task(%s, 'flaky', 'w')", job) is True
    if due:
        db.rows("UPDATE distlock.task_queue SET run_after = now() - interval '1 second' WHERE id = %s RETURNING id", job)
    return job


def completed_job(db: Db, queue: str, name: str = "send", **args: Any) -> int:
    job = enqueue(db, queue, name, priority=100, **args)  # claimed before the queue's other jobs
    assert claim(db, queue) == job and db.value("SELECT distlock.complete_task(%s, 'w')", job) is True
    return job


def listed(page: str) -> list[int]:
    return [int(i) for i in re.findall(r'<tr data-job="(\d+)"', page)]


def get(client: httpx.Client, **params: Any) -> str:
    response = client.get("/jobs", params=params)
    assert response.status_code == 200, (params, response.status_code, response.text[-300:])
    return response.text


def older(page: str) -> str | None:
    found = re.search(r'<a href="([^"]*)" id="older">', page)
    return html.unescape(found.group(1)) if found else None


@pytest.fixture
def every_state(db: Db) -> Iterator[dict[str, int]]:
    """One job in each state, each in a queue of its own."""
    yield {
        "pending": enqueue(db, "a"),
        "delayed": enqueue(db, "b", run_after="2099-01-01"),
        "processing": (enqueue(db, "c"), claim(db, "c"))[1],
        "failed": failed_job(db, "d", due=True),
        "retrying": failed_job(db, "e", due=False),
        "dead": dead_job(db, "f"),
        "completed": completed_job(db, "g"),
    }


def test_every_state_is_listed_and_each_state_filter_shows_its_own(db: Db, every_state: dict[str, int]) -> None:
    j = every_state
    with console(db.dsn) as (client, _):
        page = get(client)
        assert listed(page) == sorted(j.values(), reverse=True), "unfinished and completed jobs, newest first"
        states = {job: row_cells(page, "data-job", str(job))[4] for job in j.values()}
        assert states == {j["pending"]: "pending", j["delayed"]: "pending delayed", j["processing"]: "processing",
                          j["failed"]: "failed", j["retrying"]: "failed delayed", j["dead"]: "dead",
                          j["completed"]: "completed"}
        expected = {"pending": [j["pending"], j["delayed"]], "delayed": [j["delayed"], j["retrying"]],
                    "processing": [j["processing"]], "failed": [j["failed"], j["retrying"]], "dead": [j["dead"]],
                    "completed": [j["completed"]], "all": list(j.values())}
        for state, ids in expected.items():
            assert listed(get(client, state=state)) == sorted(ids, reverse=True), state
        # The refresh asks for <main> alone, filters kept.
        part = get(client, state="dead", part="main")
        assert "<html" not in part and listed(part) == [j["dead"]]


def test_queue_and_name_filters_and_both_with_a_state(db: Db) -> None:
    mail = [enqueue(db, "mail", "welcome"), enqueue(db, "mail", "digest"), completed_job(db, "mail", "welcome")]
    other = [enqueue(db, "images", "welcome"), completed_job(db, "images", "resize")]
    with console(db.dsn) as (client, _):
        assert listed(get(client, queue="mail")) == sorted(mail, reverse=True)
        assert listed(get(client, name="welcome")) == sorted([mail[0], mail[2], other[0]], reverse=True)
        assert listed(get(client, queue="mail", name="welcome")) == [mail[2], mail[0]]
        assert listed(get(client, queue="mail", name="welcome", state="completed")) == [mail[2]]
        assert listed(get(client, queue="images", state="pending")) == [other[0]]
        assert listed(get(client, queue="mai")) == [], "a queue is matched exactly"
        page = get(client, queue="mail", name="welcome", state="pending")
        assert 'value="mail"' in page and 'value="welcome"' in page and "<option selected>pending</option>" in page


def test_search_by_id_and_by_unique_key(db: Db) -> None:
    keyed = enqueue(db, "search", unique_key="account:7")
    done = completed_job(db, "search", unique_key="account:8")
    again = completed_job(db, "other", unique_key="account:7")
    plain = enqueue(db, "search")
    with console(db.dsn) as (client, _):
        assert listed(get(client, q=str(plain))) == [plain]
        assert listed(get(client, q=f" {done} ")) == [done], "a completed job, spaces around the id ignored"
        assert listed(get(client, q="account:7")) == [again, keyed], "unfinished and completed jobs with the key"
        assert listed(get(client, q="account:7", queue="search")) == [keyed]
        assert listed(get(client, q="account:8", state="completed")) == [done]
        assert listed(get(client, q="account")) == [], "a key is matched exactly"
        missed = get(client, q=str(done), state="dead")
        assert listed(missed) == [] and f'<a href="/jobs/{done}">job {done}</a>' in missed
        assert listed(get(client, q="999999999")) == []
        assert row_cells(get(client, q="account:7"), "data-job", str(keyed))[3] == "send account:7"


def walk(client: httpx.Client, **params: Any) -> tuple[list[int], list[int]]:
    """Every page of a listing through its Older links: the ids, and each page's count."""
    ids: list[int] = []
    sizes: list[int] = []
    page = get(client, **params)
    while True:
        ids += listed(page)
        sizes.append(len(listed(page)))
        link = older(page)
        if link is None:
            return ids, sizes
        assert len(sizes) < 100, "the pages end"
        response = client.get(link)
        assert response.status_code == 200
        page = response.text


def test_pages_go_back_by_id_without_duplicates_or_gaps(db: Db) -> None:
    ids = [whole(i) for (i,) in db.rows(
        "SELECT distlock.enqueue_task('pages', '{}', p_queue => 'p') FROM generate_series(1, 130)")]
    claimed = [t for (t,) in db.rows("SELECT task_id FROM distlock.consume_tasks(130, 'w', p_queues => ARRAY['p'])")]
    assert sorted(claimed) == ids
    # Every other job completed (the archive), the rest processing: the pages interleave the two tables.
    db.rows("SELECT distlock.complete_tasks(%s::bigint[], 'w')", ids[::2])
    ids += [enqueue(db, "p", "pages") for _ in range(3)]
    with console(db.dsn) as (client, _):
        seen, sizes = walk(client)
        assert seen == sorted(ids, reverse=True) and sizes == [50, 50, 33]
        first = get(client)
        assert older(first) == f"/jobs?state=all&before={seen[49]}"
        second = get(client, before=seen[49])
        assert listed(second)[0] == seen[50] and 'id="newest"' in second and 'id="newest"' not in first
        seen, sizes = walk(client, state="completed")
        assert seen == sorted(ids[:130:2], reverse=True) and sizes == [50, 15]


def test_a_filtered_archive_is_read_a_window_at_a_time_without_gaps(db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """Completed jobs have no index on queue, name or unique key: a page looks
    at ARCHIVE_WINDOW ids of them, says so, and Older goes on below."""
    monkeypatch.setattr(jobs, "ARCHIVE_WINDOW", 20)
    wanted = []
    for i in range(60):
        if i % 9 == 0:
            wanted.append(completed_job(db, "w", "rare"))
        elif i % 13 == 0:
            wanted.append(enqueue(db, "unfinished", "rare"))
        else:
            completed_job(db, "w", "common")
    db.rows("SELECT distlock.enqueue_task('rare', '{}', p_queue => 'unfinished') FROM generate_series(1, 55)")
    expected = [int(i) for (i,) in db.rows("SELECT id FROM distlock.jobs WHERE task_name = 'rare' ORDER BY id DESC")]
    with console(db.dsn) as (client, _):
        seen, sizes = walk(client, name="rare")
        assert seen == expected and len(seen) == len(set(seen)), "every match once, newest first"
        assert sizes[0] == 50 and all(size < 50 for size in sizes[1:]) and len(sizes) > 3, sizes
        page = get(client, name="rare", before=expected[50])
        assert "no index on queue, job name or unique key" in text_of(page, "searched")
        assert listed(get(client, name="rare", state="pending"))[:1] == expected[:1], "unfinished jobs need no window"


def test_a_windowed_page_steps_over_ids_the_archive_does_not_have(db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a window without enough matches, the next page starts at the
    next older match or archive id, not a window lower."""
    monkeypatch.setattr(jobs, "ARCHIVE_WINDOW", 20)
    archived = completed_job(db, "w", "rare")
    db.rows("SELECT distlock.enqueue_task('common', '{}', p_queue => 'x') FROM generate_series(1, 40)")
    unfinished = enqueue(db, "y", "rare")
    for _ in range(5):
        completed_job(db, "w", "common")
    with console(db.dsn) as (client, _):
        seen, sizes = walk(client, name="rare")
        assert seen == [unfinished, archived] and sizes == [1, 1], "two pages, though 40 ids lie between"
        first = get(client, name="rare")
        assert older(first) == f"/jobs?state=all&name=rare&before={archived + 1}"


def bulk_form(page: str) -> dict[str, str]:
    """The hidden fields of the page's bulk form."""
    form = re.search(r'<form method="post" action="/actions/[^"]+" id="bulk">(.*?)</form>', page, re.S)
    assert form, "a bulk form"
    return hidden_fields(form.group(1))


def hidden_fields(page: str) -> dict[str, str]:
    return {k: html.unescape(v) for k, v in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', page)}


def confirm(client: httpx.Client, command: str, fields: dict[str, str], ids: list[int]) -> httpx.Response:
    """Posts ticked `ids` as the page's form does, checks the question page, confirms."""
    asked = client.post(f"/actions/{command}", data={**fields, "ids": [str(i) for i in ids]})
    assert asked.status_code == 200, asked.text[-300:]
    again = hidden_fields(asked.text)
    assert again["ids"] == ",".join(map(str, ids)) and again["confirmed"] == "yes"
    done = client.post(f"/actions/{command}", data=again)
    assert done.status_code == 303
    return done


def test_bulk_retry_delete_and_release_ask_first_and_come_back_to_the_list(db: Db) -> None:
    dead = [dead_job(db, "mail") for _ in range(3)]
    busy = [(enqueue(db, "mail"), claim(db, "mail"))[1] for _ in range(2)]
    waiting = enqueue(db, "mail")
    with console(db.dsn) as (client, token):
        page = get(client, state="dead", queue="mail")
        fields = bulk_form(page)
        assert fields["token"] == token and fields["back"] == "/jobs?state=dead&queue=mail"
        assert sorted(re.findall(r'name="ids" value="(\d+)"', page)) == sorted(map(str, dead))
        assert re.findall(r'formaction="/actions/([\w-]+)"', page) == ["retry-dead", "delete-dead"]
        assert re.findall(r'formaction="/actions/([\w-]+)"', get(client, state="processing")) == ["requeue"]
        assert 'name="ids"' not in get(client, state="pending"), "no box where no action applies"

        asked = client.post("/actions/retry-dead", data={**fields, "ids": [str(dead[0]), str(dead[1])]})
        assert text_of(asked.text, "question") == f"Retry 2 dead job(s) among ids {dead[0]}, {dead[1]}?"
        assert db.value("SELECT count(*) FROM distlock.task_queue WHERE status = 'dead'") == 3, "nothing done yet"
        done = confirm(client, "retry-dead", fields, dead[:2])
        assert done.headers["location"] == "/jobs?state=dead&queue=mail&done=retry-dead&n=2"
        back = client.get(done.headers["location"]).text
        assert "retry-dead: 2 job(s)" in back and listed(back) == [dead[2]]
        assert db.rows("SELECT status FROM distlock.task_queue WHERE id = ANY(%s) ORDER BY id", dead[:2]) == [
            ("pending",), ("pending",)]

        done = confirm(client, "delete-dead", bulk_form(back), [dead[2]])
        assert done.headers["location"] == "/jobs?state=dead&queue=mail&done=delete-dead&n=1"
        assert db.value("SELECT count(*) FROM distlock.jobs WHERE id = %s", dead[2]) == 0

        processing = get(client, state="processing")
        done = confirm(client, "requeue", bulk_form(processing), busy)
        assert done.headers["location"] == "/jobs?state=processing&done=requeue&n=2"
        assert listed(client.get(done.headers["location"]).text) == []
        assert db.rows("SELECT status FROM distlock.task_queue WHERE id = ANY(%s)", busy) == [("pending",)] * 2
        assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", waiting) == "pending"

        nothing = client.post("/actions/retry-dead", data={**bulk_form(page), "confirmed": "yes"})
        assert nothing.status_code == 400 and "tick the jobs" in nothing.text, "no box ticked is not every job"


def test_a_monitor_is_refused_the_job_list(db: Db, monitor_role: str) -> None:
    job = dead_job(db)
    with console(f"{db.dsn} user={monitor_role}") as (client, _):
        for params in ({}, {"state": "dead"}, {"q": str(job)}, {"part": "main"}):
            response = client.get("/jobs", params=params)
            assert response.status_code == 403, params
            assert "needs the admin capability" in text_of(response.text, "forbidden")
            assert listed(response.text) == [] and "smtp down" not in response.text and "<form" not in response.text


def test_hostile_names_keys_workers_and_errors_show_as_text(db: Db) -> None:
    job = db.value("SELECT distlock.enqueue_task(%s, '{}', now(), 0, 1, %s, %s)", EVIL, EVIL, EVIL)
    assert db.value("SELECT task_id FROM distlock.consume_task(%s, p_queues => ARRAY[%s])", EVIL, EVIL) == job
    db.value("SELECT distlock.fail_task(%s, %s, %s)", job, EVIL + "x" * 3000, EVIL)
    with console(db.dsn) as (client, _):
        for params in ({}, {"queue": EVIL}, {"name": EVIL, "state": "dead"}, {"q": EVIL}, {"queue": EVIL, "part": "main"}):
            page = get(client, **params)
            assert listed(page) == [job], params
            assert "<script>" not in page, params
            assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4, params
        error = re.search(r'<td class="error" title="([^"]*)">', get(client))
        assert error and html.unescape(error.group(1)).startswith(EVIL) and len(error.group(1)) < 2100, \
            "the error's title, escaped and cut"


def test_bad_query_values_are_refused_with_400_never_500(db: Db) -> None:
    dead_job(db)
    with console(db.dsn) as (client, token):
        bad = [{"state": "running"}, {"state": "<b>"}, {"before": "abc"}, {"before": "0"}, {"before": "-5"},
               {"before": "9" * 10_000}, {"before": "9223372036854775808"}, {"before": "1.5"},
               {"q": "9223372036854775808"}, {"q": "9" * 10_000}, {"queue": "x" * 1001}, {"name": "é" * 501},
               {"queue": "a\x00b"}, {"q": "k\x00"}]
        for params in bad:
            response = client.get("/jobs", params=params)
            assert response.status_code == 400, (str(params)[:60], response.status_code)
            assert text_of(response.text, "error")
        assert client.get("/jobs", params={"q": "9223372036854775807", "before": "9223372036854775807"}).status_code == 200
        assert client.get("/jobs", params={"state": "", "queue": "", "name": "", "q": " ", "before": ""}).status_code == 200
        assert client.get("/jobs", params={"q": "①"}).status_code == 200, "not ASCII digits: a unique key"
        assert client.get("/jobs/" + "9" * 10_000).status_code == 404
        for ids in ("9" * 10_000, "9223372036854775808", "1,x"):
            response = post(client, "retry-dead", token=token, ids=ids, confirmed="yes", back="/jobs")
            assert response.status_code == 400, (ids[:30], response.status_code)


def plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child)


def test_each_statement_reads_the_archive_of_200k_jobs_by_its_primary_key(db: Db) -> None:
    db.admin.execute("""
        INSERT INTO distlock.completed_jobs (id, queue, task_name, payload, worker_id, created_at, started_at,
                                             completed_at, attempts, max_attempts, run_after, priority, unique_key)
        SELECT nextval('distlock.task_queue_id_seq'), 'q' || i % 10, 'job' || i % 7, '{"n": 1}', 'w',
               now() - interval '1 day', now() - interval '1 day', now() - interval '1 day' + i * interval '1 ms',
               1, 5, now() - interval '1 day', 0, 'key' || i
          FROM generate_series(1, 200000) i""")
    db.admin.execute("ANALYZE distlock.completed_jobs")
    unfinished = [enqueue(db, "q3", "job1", unique_key=f"u{i}") for i in range(60)]
    middle = whole(db.value("SELECT id FROM distlock.completed_jobs WHERE unique_key = 'key100000'"))
    cases = {
        "default listing": (jobs.JobQuery(), 51),
        "an older page": (jobs.JobQuery(before=middle), 51),
        "state=completed": (jobs.JobQuery(state="completed"), 51),
        "state=completed, older": (jobs.JobQuery(state="completed", before=middle), 51),
        "id search": (jobs.JobQuery(search=str(middle)), 1),
        "unique-key search": (jobs.JobQuery(search="key5"), jobs.ARCHIVE_WINDOW),
        "queue and name": (jobs.JobQuery(state="completed", queue="q3", name="job1", before=middle), jobs.ARCHIVE_WINDOW),
    }
    for case, (query, most) in cases.items():
        sql, params = jobs.statement(query, None if (top := jobs.archive_top(db.admin, query)) is None
                                     else top - jobs.ARCHIVE_WINDOW)
        explained = db.admin.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params).fetchone()
        assert explained is not None
        archive = [n for n in plan_nodes(explained[0][0]["Plan"]) if n.get("Relation Name") == "completed_jobs"]
        assert archive, case
        # A key is looked up in the archive's index of keys (0.4.0, for
        # enqueue_task's p_unique_for), where there is one.
        indexes = {"completed_jobs_pkey"} | ({"completed_jobs_unique_key_idx"} if query.unique_key else set())
        for node in archive:
            assert node["Node Type"] == "Index Scan" and node.get("Index Name") in indexes, (case, node)
            read = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
            assert read <= most, (case, read)
    with console(db.dsn) as (client, _):
        page = get(client, q="key5")
        assert listed(page) == [] and "ids" in text_of(page, "searched") and older(page)
        assert len(listed(get(client, q="key199999"))) == 1, "a key among the newest completed jobs"
        assert listed(get(client, queue="q3", name="job1"))[:3] == sorted(unfinished, reverse=True)[:3]
