"""Review of the scheduler's time zones (issue 48): the console's task page
shows a zoned task's runs on the wall clock the scheduler runs them on."""

from __future__ import annotations

import re

import psycopg

from conftest import Db
from test_console import console, text_of


def test_review_zones_a_cet_task_page_shows_the_time_it_runs_at(db: Db) -> None:
    # 'CET' is an IANA zone with summer time (pg_tzset, the scheduler), and
    # also the abbreviation of a fixed +01:00, which timezone('CET', ts), the
    # console's reads, takes first: a July noon run (10:00 UTC) shows as 11:00.
    # A fix may refuse such a name instead (22023): then nothing is shown wrong.
    try:
        made = db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, schedule_timezone)"
                        " VALUES ('cet-noon', 'test', '0 12 1 7 *', 'CET') RETURNING id")
    except psycopg.errors.InvalidParameterValue:
        return
    task = int(made)  # type: ignore[arg-type]
    runs_at = db.value("SELECT to_char(next_run_at AT TIME ZONE 'UTC', 'HH24:MI') FROM distlock.scheduled_tasks"
                       " WHERE id = %s", task)
    assert runs_at == "10:00", "the scheduler runs it at noon CEST"
    with console(db.dsn) as (client, _token):
        page = client.get(f"/tasks/{task}").text
    shown = re.findall(r"<li>([^<]*)</li>", re.search(r'id="next-runs">(.*?)</section>', page, re.S).group(1))  # type: ignore[union-attr]
    assert shown and all(" 12:00:00 " in slot for slot in shown), shown
    assert " 12:00:00 " in text_of(page, "task-next-run"), text_of(page, "task-next-run")
