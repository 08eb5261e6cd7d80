"""The console's job page lists each attempt that ended without success
(distlock.job_attempts, 0.4.0): newest first, with its outcome, worker,
duration and error, escaped and cut; a job none of whose attempts failed
says so; the list ends at the newest ATTEMPTS_SHOWN."""

from __future__ import annotations

import re

from selenium.webdriver.remote.webdriver import WebDriver

from conftest import Db, connect
from test_browser import browser, texts  # noqa: F401 - browser is a fixture
from test_console import console
from test_console_jobs import enqueue
from pg_distlock.console import pages

EVIL = "<script>alert(1)</script>"


def fail(db: Db, job: int, queue: str, error: str, worker: str = "w") -> None:
    """Claims `job` and fails its attempt, then makes its retry due now (by
    hand: a fresh connection claims it, from the head of the index)."""
    with connect(db.dsn) as conn:
        claimed = conn.execute("SELECT task_id FROM distlock.consume_task(%s, p_queues => ARRAY[%s])",
                               (worker, queue)).fetchone()
        assert claimed == (job,)
        assert conn.execute("SELECT distlock.fail_task(%s, %s, %s)", (job, error, worker)).fetchone() == (True,)
    db.rows("UPDATE distlock.task_queue SET run_after = now() - interval '1 second' WHERE id = %s RETURNING id", job)


def attempt_rows(page: str) -> list[list[str]]:
    table = re.search(r'<table id="attempts">.*?<tbody>(.*?)</tbody>', page, re.S)
    assert table, page[-2000:]
    return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", table.group(1), re.S)]


def test_a_job_page_lists_its_failed_attempts_newest_first_then_its_completion(db: Db) -> None:
    job = enqueue(db, "att", max_attempts=5)
    fail(db, job, "att", "smtp down", worker="w1")
    fail(db, job, "att", EVIL, worker="w2")
    with connect(db.dsn) as conn:
        assert conn.execute("SELECT task_id FROM distlock.consume_task('w3', p_queues => ARRAY['att'])").fetchone() == (job,)
        assert conn.execute("SELECT distlock.complete_task(%s, 'w3')", (job,)).fetchone() == (True,)
    with console(db.dsn) as (client, _):
        response = client.get(f"/jobs/{job}")
        assert response.status_code == 200
        rows = attempt_rows(response.text)
    assert [row[:3] for row in rows] == [["2", "failed", "w2"], ["1", "failed", "w1"]]
    assert [row[6] for row in rows] == ["&lt;script&gt;alert(1)&lt;/script&gt;", "smtp down"]
    assert EVIL not in response.text
    assert all(re.fullmatch(r"\d+ ms|\d+\.\d s", row[5]) for row in rows), rows


def test_a_long_error_is_cut_and_a_job_without_failures_says_none(db: Db) -> None:
    long = enqueue(db, "att-long")
    fail(db, long, "att-long", "x" * (pages.ATTEMPT_ERROR_CHARS + 5000))
    fine = enqueue(db, "att-fine")
    with console(db.dsn) as (client, _):
        page = client.get(f"/jobs/{long}").text
        none = client.get(f"/jobs/{fine}").text
    (row,) = attempt_rows(page)
    assert row[6] == "x" * pages.ATTEMPT_ERROR_CHARS + "… (cut)"
    assert '<table id="attempts">' not in none and re.search(r'id="attempts-none">None\.<', none)


def test_only_the_newest_attempts_are_listed(db: Db) -> None:
    job = enqueue(db, "att-many", max_attempts=pages.ATTEMPTS_SHOWN + 10)
    # Attempts recorded as the server would, without 110 claims.
    db.rows("""INSERT INTO distlock.job_attempts (job_id, attempt, worker_id, started_at, ended_at, outcome, error)
               SELECT %s, a, 'w', now(), now(), 'failed', 'e' || a FROM generate_series(1, %s) a RETURNING 1""",
            job, pages.ATTEMPTS_SHOWN + 10)
    with console(db.dsn) as (client, _):
        page = client.get(f"/jobs/{job}").text
    rows = attempt_rows(page)
    assert len(rows) == pages.ATTEMPTS_SHOWN and rows[0][0] == str(pages.ATTEMPTS_SHOWN + 10)
    assert f"The newest {pages.ATTEMPTS_SHOWN} attempts." in page


def test_an_operator_reads_a_jobs_attempts_in_a_browser(db: Db, browser: WebDriver) -> None:  # noqa: F811
    job = enqueue(db, "att-browser", max_attempts=5)
    fail(db, job, "att-browser", EVIL, worker="w1")
    with console(db.dsn) as (client, _):
        browser.get(str(client.base_url).rstrip("/") + f"/jobs/{job}")
        assert texts(browser, "#attempts tbody td:nth-child(2)") == ["failed"]
        assert texts(browser, "#attempts td.error") == [EVIL]
        assert browser.execute_script("return window.__xss === undefined")
