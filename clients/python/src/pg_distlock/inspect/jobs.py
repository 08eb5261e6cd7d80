"""The job browser's reads: unfinished jobs (distlock.task_queue) and
completed ones (distlock.completed_jobs), newest first by id, a page at a
time (keyset: `before` an id, never OFFSET, and the archive is never
counted). Admin only: the rows are the producers' data.

Every statement reads each table through its primary key. The archive has
no index on queue, job name or unique key, so a page filtered by one of
them looks at ARCHIVE_WINDOW of its ids at most, and says so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import psycopg

from .reads import Rows, _rows

PAGE_SIZE = 50
# The most archive ids one filtered page looks at (about 10 ms per 100,000).
ARCHIVE_WINDOW = 100_000
STATES = ("all", "pending", "delayed", "processing", "failed", "dead", "completed")
MAX_ID = 2**63 - 1
NAME_BYTES = 1000
# Of a last error, at most this much is shown (the job page shows it whole).
ERROR_CHARS = 2000

DELAYED = "status IN ('pending', 'failed') AND run_after > pg_catalog.now()"
UNFINISHED_STATES = {
    "pending": "status = 'pending'",
    "delayed": DELAYED,
    "processing": "status = 'processing'",
    "failed": "status = 'failed'",
    "dead": "status = 'dead'",
}
COLUMNS = ("id, queue, task_name, {status} AS status, {delayed} AS delayed, attempts, max_attempts, priority, "
           "run_after, created_at, started_at, completed_at, worker_id, "
           "pg_catalog.left(last_error, %(error_chars)s) AS last_error, unique_key, {group} AS group_key")
# Whether the job tables have groups (pg_distlock 0.4.0): before, a page
# shows none.
GROUPED_SQL = """
    SELECT 1 FROM pg_catalog.pg_attribute
     WHERE attrelid OPERATOR(pg_catalog.=) 'distlock.task_queue'::pg_catalog.regclass
       AND attname OPERATOR(pg_catalog.=) 'group_key' AND NOT attisdropped"""


def whole_number(text: str) -> bool:
    return text.isascii() and text.isdigit()


def job_id(text: str) -> Optional[int]:
    """`text` as a job id (a bigint of ASCII digits), else None."""
    if not (whole_number(text) and len(text) <= 19):
        return None
    value = int(text)
    return value if value <= MAX_ID else None


@dataclass(frozen=True)
class JobQuery:
    """Which jobs a page shows; ValueError for a value no job can match
    that way (an unknown state, a name longer than names may be)."""
    state: str = "all"
    queue: Optional[str] = None
    name: Optional[str] = None
    # A whole number is a job id; anything else an exact unique key.
    search: Optional[str] = None
    before: Optional[int] = None

    def __post_init__(self) -> None:
        if self.state not in STATES:
            raise ValueError(f"state must be one of {', '.join(STATES)}")
        for what, text in (("queue", self.queue), ("job name", self.name), ("search", self.search)):
            if text is not None and ("\x00" in text or len(text.encode("utf-8", "replace")) > NAME_BYTES):
                raise ValueError(f"a {what} has at most {NAME_BYTES} bytes and no NUL character")
        if self.search is not None and whole_number(self.search) and self.job_id is None:
            raise ValueError(f"no job has that id: job ids are whole numbers up to {MAX_ID}")
        if self.before is not None and not 0 < self.before <= MAX_ID:
            raise ValueError(f"before must be a job id, from 1 to {MAX_ID}")

    @property
    def job_id(self) -> Optional[int]:
        return None if self.search is None else job_id(self.search)

    @property
    def unique_key(self) -> Optional[str]:
        return self.search if self.search is not None and not whole_number(self.search) else None

    @property
    def unfinished(self) -> bool:
        return self.state != "completed"

    @property
    def completed(self) -> bool:
        return self.state in ("all", "completed")

    @property
    def windowed(self) -> bool:
        """Whether the archive is read a window at a time: filtered by what it has no index on."""
        filtered = self.queue is not None or self.name is not None or self.unique_key is not None
        return self.completed and filtered and self.job_id is None


@dataclass(frozen=True)
class JobPage:
    rows: Rows
    # The next page's `before`; None when no older job matches.
    older: Optional[int]
    # When the page ended for want of matches in its window of the archive:
    # the lowest and highest archive id it looked at.
    searched: Optional[tuple[int, int]] = None


def _branch(table: str, columns: str, conditions: list[str]) -> str:
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    return f"(SELECT {columns} FROM {table}{where} ORDER BY id DESC LIMIT %(limit)s)"


def statement(query: JobQuery, floor: Optional[int] = None, grouped: bool = True) -> tuple[str, dict[str, Any]]:
    """The statement of a page (one more row than shown: is there more?),
    with the archive read from id `floor` up only; each job's group when
    the tables are `grouped`."""
    group = "group_key" if grouped else "NULL::text"
    params = {"before": query.before, "queue": query.queue, "name": query.name, "job_id": query.job_id,
              "key": query.unique_key, "floor": floor, "limit": PAGE_SIZE + 1, "error_chars": ERROR_CHARS + 1}
    common = [condition for key, condition in (("before", "id < %(before)s"), ("job_id", "id = %(job_id)s"),
                                               ("queue", "queue = %(queue)s"), ("name", "task_name = %(name)s"),
                                               ("key", "unique_key = %(key)s"))
              if params[key] is not None]
    branches = []
    if query.unfinished:
        state = UNFINISHED_STATES.get(query.state)
        branches.append(_branch("distlock.task_queue", COLUMNS.format(status="status::text", delayed=DELAYED, group=group),
                                common + ([state] if state else [])))
    if query.completed:
        branches.append(_branch("distlock.completed_jobs", COLUMNS.format(status="'completed'::text", delayed="false", group=group),
                                common + (["id >= %(floor)s"] if floor is not None else [])))
    if len(branches) == 1:
        return branches[0], params
    return f"SELECT * FROM ({' UNION ALL '.join(branches)}) j ORDER BY id DESC LIMIT %(limit)s", params


def archive_top(conn: psycopg.Connection[Any], query: JobQuery) -> Optional[int]:
    """Where a windowed page's look at the archive begins (below this id);
    None when the page reads no window or the archive is empty."""
    if not query.windowed:
        return None
    if query.before is not None:
        return query.before
    found = _rows(conn, "SELECT max(id) + 1 AS top FROM distlock.completed_jobs")
    return None if not found else found[0]["top"]


def page(conn: psycopg.Connection[Any], query: JobQuery) -> Optional[JobPage]:
    """The jobs `query` asks for, PAGE_SIZE at most; None when the role may not read them."""
    top = archive_top(conn, query)
    floor = None if top is None else top - ARCHIVE_WINDOW
    sql, params = statement(query, floor, bool(_rows(conn, GROUPED_SQL)))
    rows = _rows(conn, sql, params)
    if rows is None:
        return None
    shown = [row for row in rows if floor is None or row["id"] >= floor]
    if len(shown) > PAGE_SIZE:
        return JobPage(shown[:PAGE_SIZE], shown[PAGE_SIZE - 1]["id"])
    if top is None or floor is None:
        return JobPage(shown, None)
    # The window held too few matches: the next page starts at the next
    # older match among unfinished jobs, or the next older archive id.
    below = [row["id"] for row in rows if row["id"] < floor][:1]
    archive = _rows(conn, "SELECT max(id) AS id FROM distlock.completed_jobs WHERE id < %s", (floor,))
    below += [archive[0]["id"]] if archive and archive[0]["id"] is not None else []
    return JobPage(shown, max(below) + 1 if below else None, (max(floor, 1), top - 1))
