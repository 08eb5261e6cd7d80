"""The console as a person uses it: Debian's Chromium, headless, driven by
Selenium through Debian's chromedriver (nothing is downloaded), against a
database with real activity: a worker holding a claim, a lock wait chain,
queued and dead jobs.

Screenshots of the overview and the lock graph are written to the test's
work directory; with DISTLOCK_UPDATE_SCREENSHOTS=1 they replace the ones in
docs/ that the README shows."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.select import Select

from conftest import Db, connect, eventually, lock_wait_chain
from test_cli import dead_job
from test_console import console

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs")


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    # Selenium Manager would download a driver it cannot find: both paths are given, and it stays offline.
    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--hide-scrollbars", "--window-size=1280,900"):
        options.add_argument(argument)
    profile = tempfile.mkdtemp(prefix="pg_distlock_chromium_")
    options.add_argument(f"--user-data-dir={profile}")
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def screenshot(driver: WebDriver, name: str) -> None:
    out = os.environ.get("DISTLOCK_PY_TEST_OUT", tempfile.gettempdir())
    driver.save_screenshot(os.path.join(out, name))
    if os.environ.get("DISTLOCK_UPDATE_SCREENSHOTS") == "1":
        driver.save_screenshot(os.path.join(DOCS, name))


# The page replaces its <main> every few seconds: an element found before a
# refresh is stale after it. Reads are therefore one script each, which runs
# between refreshes, and a click is retried on a fresh element.
def texts(driver: WebDriver, css: str) -> list[str]:
    found = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.textContent.trim())", css)
    return [str(t) for t in found]


def text(driver: WebDriver, css: str) -> str:
    found = texts(driver, css)
    assert found, f"nothing matches {css}"
    return found[0]


def count(driver: WebDriver, css: str) -> int:
    return int(driver.execute_script("return document.querySelectorAll(arguments[0]).length", css))


def click(driver: WebDriver, css: str) -> None:
    def clicked() -> bool:
        try:
            driver.find_element(By.CSS_SELECTOR, css).click()
            return True
        except StaleElementReferenceException:
            return False
    eventually(clicked, what=f"a click on {css}")


def test_an_operator_reads_the_overview_and_the_lock_graph_and_retries_a_dead_job(db: Db, browser: WebDriver) -> None:
    dead = dead_job(db, "mail")
    for _ in range(3):
        db.value("SELECT distlock.enqueue_task('send', '{}', p_queue => 'mail')")
    for _ in range(5):
        db.value("SELECT distlock.enqueue_task('resize', '{}', p_queue => 'images')")
    db.value("SELECT distlock.complete_task(task_id, 'w') FROM distlock.consume_tasks(2, 'w', p_queues => ARRAY['images'])")
    db.add_tasks(4, "report")
    worker = connect(db.dsn)
    claimed = worker.execute("SELECT task_name, fencing_token FROM distlock.worker_fetch_and_execute_task('w1')").fetchone()
    assert claimed is not None
    task, token = claimed
    try:
        with lock_wait_chain(db, "orders:42") as holder_pid, console(db.dsn) as (client, _):
            base = str(client.base_url).rstrip("/")
            browser.get(base + "/")
            assert "pg_distlock" in browser.title
            view = db.rows("SELECT pending, processing, failed, dead, completed_last_hour FROM distlock.queues"
                           " WHERE name = 'mail'")[0]
            cells = texts(browser, 'tr[data-queue="mail"] td')
            assert [int(c.replace(",", "")) for c in cells[3:8]] == list(view) == [3, 0, 0, 1, 0]
            assert text(browser, "#count-pending") == "6" and text(browser, "#count-dead") == "1"
            running = text(browser, "#running")
            assert task in running and str(token) in running, "the claim and its fencing token"
            # The page refreshes itself: a new job shows up without a reload.
            marker = browser.execute_script("window.notReloaded = true; return window.notReloaded")
            assert marker is True
            db.value("SELECT distlock.enqueue_task('send', '{}', p_queue => 'mail')")
            eventually(lambda: text(browser, "#count-pending") == "7", timeout=20, what="the overview to refresh")
            assert browser.execute_script("return window.notReloaded") is True
            screenshot(browser, "console-overview.png")

            browser.get(base + "/locks")
            eventually(lambda: count(browser, "svg g.edge") >= 2, timeout=20, what="two waits drawn")
            assert count(browser, f'svg g.node.holder[data-pid="{holder_pid}"]') == 1, "the holder drawn as such"
            assert count(browser, "svg g.node:not(.holder)") == 2, "two waiters"
            assert count(browser, "svg g.cycle") == 0, "a chain, not a deadlock"
            screenshot(browser, "console-locks.png")

            # Retry the dead job from the overview: asked first, then runnable.
            browser.get(base + "/")
            click(browser, f'tr[data-job="{dead}"] button[data-action="retry-dead"]')
            # A form's POST navigates after click() returns: wait for the page it leads to.
            eventually(lambda: count(browser, "#question"), what="the confirmation page")
            assert "Retry" in text(browser, "#question")
            assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", dead) == "dead"
            click(browser, "#confirm")
            eventually(lambda: count(browser, "p.message"), what="the result")
            assert "retry-dead: 1 job(s)" in text(browser, "p.message")
            assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", dead) == "pending"
    finally:
        worker.close()


def test_a_monitor_sees_no_buttons_and_is_refused_an_action(db: Db, monitor_role: str, browser: WebDriver) -> None:
    dead = dead_job(db, "mail")
    with console(f"{db.dsn} user={monitor_role}") as (client, token):
        browser.get(str(client.base_url).rstrip("/") + "/")
        assert text(browser, "#count-dead") == "1"
        assert count(browser, "form, button") == 0, "no action offered"
        # Posting one anyway, from the page itself with the console's own token.
        status = browser.execute_async_script(
            """const done = arguments[arguments.length - 1];
               fetch('/actions/retry-dead', {method: 'POST', body: new URLSearchParams(
                   {token: arguments[0], ids: arguments[1], confirmed: 'yes'})})
                 .then(r => done(r.status), e => done(String(e)));""", token, str(dead))
        assert status == 403
    assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", dead) == "dead"



def test_an_operator_filters_the_jobs_by_state_and_retries_the_ticked_ones(db: Db, browser: WebDriver) -> None:
    dead = [dead_job(db, "mail") for _ in range(2)]
    pending = [db.value("SELECT distlock.enqueue_task('send', '{}', p_queue => 'mail')") for _ in range(3)]
    delayed = db.value("SELECT distlock.enqueue_task('report', '{}', now() + interval '1 hour', p_queue => 'mail')")
    ids = "#jobs tbody tr td:nth-child(2)"
    with console(db.dsn) as (client, _):
        base = str(client.base_url).rstrip("/")
        browser.get(base + "/jobs")
        assert texts(browser, ids) == [str(i) for i in sorted([*dead, *pending, delayed], reverse=True)]
        assert text(browser, f'tr[data-job="{delayed}"] td.state') == "pending delayed"
        screenshot(browser, "console-jobs.png")

        def choose_dead() -> bool:
            try:
                Select(browser.find_element(By.NAME, "state")).select_by_visible_text("dead")
                return True
            except StaleElementReferenceException:
                return False
        eventually(choose_dead, what="state dead chosen")
        click(browser, "#filter")
        eventually(lambda: "state=dead" in browser.current_url, what="the filtered list")
        assert texts(browser, ids) == [str(dead[1]), str(dead[0])]
        assert texts(browser, "#jobs td.state") == ["dead", "dead"]
        # The list refreshes itself with its filter: a job that dies shows up without a reload.
        died = dead_job(db, "late")
        eventually(lambda: texts(browser, ids) == [str(died), str(dead[1]), str(dead[0])], timeout=20,
                   what="the filtered list to refresh")

        for job in dead:
            click(browser, f'tr[data-job="{job}"] input[type="checkbox"]')
        # Ticked boxes hold the refresh, with the focus elsewhere too: it would untick them.
        browser.execute_script("document.activeElement.blur()")
        refreshed = browser.execute_script("return document.body.dataset.refreshed")
        dead_job(db, "later")
        time.sleep(7)
        assert browser.execute_script("return document.body.dataset.refreshed") == refreshed
        assert count(browser, 'input[type="checkbox"]:checked') == 2
        click(browser, 'button[data-action="retry-dead"]')
        eventually(lambda: count(browser, "#question"), what="the confirmation page")
        assert text(browser, "#question") == f"Retry 2 dead job(s) among ids {dead[1]}, {dead[0]}?"
        click(browser, "#confirm")
        eventually(lambda: count(browser, "p.message"), what="the result")
        assert "retry-dead: 2 job(s)" in text(browser, "p.message")
        assert "state=dead" in browser.current_url and texts(browser, ids)[1:] == [str(died)]
        assert db.rows("SELECT status FROM distlock.task_queue WHERE id = ANY(%s)", dead) == [("pending",)] * 2
