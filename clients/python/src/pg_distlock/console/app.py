"""The console's web application (Starlette, ASGI): pages that refresh
themselves, the admin actions behind a confirmation, and /metrics.

Everything is read through a small pool of autocommit connections, one short
statement at a time; Jinja2 escapes everything it renders, and a
Content-Security-Policy that allows only the console's own script and style
backs that up. Actions need the admin capability (checked for each request,
so a revoked role loses them at once) and the form token of this process,
which a page from another site cannot read."""

from __future__ import annotations

import contextlib
import re
import secrets
from typing import Any, AsyncIterator, Awaitable, Callable, Optional
from urllib.parse import parse_qs, parse_qsl, urlencode

import psycopg
from jinja2 import Environment, PackageLoader, select_autoescape
from psycopg_pool import ConnectionPool
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from .. import metrics
from ..inspect import actions, reads
from ..inspect.jobs import JobQuery, job_id as _job_id
from . import formatting, pages

REFRESH_SECONDS = 5
# How long a request waits for a pooled connection before it shows the error
# page: a database that does not answer must not hold every refresh for the
# pool's default 30 s.
CONNECT_SECONDS = 10.0
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; "
                               "form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]", "::1")
# Each page: its path and title; pages.<name> reads it, <name>.html shows it.
PAGES: dict[str, tuple[str, str]] = {
    "overview": ("/", "Overview"),
    "jobs": ("/jobs", "Jobs"),
    "locks": ("/locks", "Locks and waits"),
    "coordination": ("/coordination", "Leases and elections"),
    "tasks": ("/tasks", "Tasks"),
    "workers": ("/workers", "Workers"),
}


class Forbidden(Exception):
    pass


class Console:
    def __init__(self, dsn: str, pool_size: int = 4) -> None:
        # min_size 1: a refresh finds a connection ready; max_size bounds what
        # a room full of open dashboards can take from max_connections.
        self.pool = ConnectionPool(dsn, min_size=1, max_size=pool_size, open=False, name="pg-distlock console",
                                   kwargs={"autocommit": True, "application_name": "pg-distlock console"})
        self.token = secrets.token_urlsafe(24)
        self.templates = Environment(loader=PackageLoader("pg_distlock.console", "templates"),
                                     autoescape=select_autoescape(default=True, default_for_string=True),
                                     trim_blocks=True, lstrip_blocks=True)
        self.templates.filters.update(formatting.FILTERS)
        self.main_parts = {t for t in self.templates.list_templates() if t.endswith("_main.html")}

    def read(self, page: Callable[[psycopg.Connection[Any]], dict[str, Any]]) -> dict[str, Any]:
        with self.pool.connection(timeout=CONNECT_SECONDS) as conn:
            reads.require_installed(conn)
            return page(conn)

    def html(self, template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
        body = self.templates.get_template(template).render(
            token=self.token, refresh=REFRESH_SECONDS, pages=PAGES, **context)
        return HTMLResponse(body, status_code=status_code, headers=HEADERS)

    async def page(self, request: Request, name: str, read: Callable[[psycopg.Connection[Any]], dict[str, Any]]
                   ) -> Response:
        try:
            data = await run_in_threadpool(self.read, read)
        except (psycopg.Error, reads.NotInstalled) as error:
            return self.html("error.html", 503, page=name, error=str(error).strip())
        # Only the pages that refresh themselves have a main part to ask for.
        part = request.query_params.get("part") == "main" and f"{name}_main.html" in self.main_parts
        return self.html(f"{name}_main.html" if part else f"{name}.html", data.pop("http_status", 200), page=name,
                         message=banner(request.query_params), **data)


def _local_path(value: Optional[str]) -> str:
    """Where to go back to after an action: a path of this console only,
    with its query (a list's filters) but not an earlier outcome."""
    # Browsers drop tabs and line breaks from a URL before reading it, so
    # "/\t/evil.example" would be "//evil.example": none is taken.
    if not (value and value.startswith("/") and not value.startswith("//") and "\\" not in value
            and value.isprintable()):
        return "/"
    path, _, query = value.partition("?")
    kept = [(k, v) for k, v in parse_qsl(query, keep_blank_values=True) if k not in ("done", "n", "part")]
    return f"{path}?{urlencode(kept)}" if kept else path


def _task_id(value: str) -> Optional[int]:
    """A task id from a path or form, None unless an integer (task ids are
    serial): no digits, too many or a value past 2**31 - 1 name no task."""
    if not (value.isascii() and value.isdigit() and len(value) <= 10):
        return None
    task_id = int(value)
    return task_id if task_id <= 2**31 - 1 else None


def _form_task_id(value: Optional[str]) -> Optional[int]:
    task_id = None if value is None else _task_id(value)
    if value is not None and task_id is None:
        raise ValueError(f"a task id is a whole number below 2**31, got {value!r}")
    return task_id


def _minutes(value: Optional[str]) -> int:
    """The sweep's timeout from a form (30 when empty); ValueError unless
    whole minutes from 1 to a year, in ASCII digits."""
    if not value:
        return 30
    if not (value.isascii() and value.isdigit() and len(value) <= 6 and 1 <= int(value) <= 525_600):
        raise ValueError(f"the sweep's timeout is whole minutes from 1 to 525600, got {value[:40]!r}")
    return int(value)


def _ids(value: Optional[str]) -> list[int]:
    """Job ids from a form; ValueError unless each is a bigint (an id of
    10,000 digits is no job, not a failure to convert)."""
    words = [w for w in re.split(r"[\s,]+", value or "") if w]
    ids = [_job_id(w) for w in words]
    if None in ids:
        raise ValueError(f"job ids must be whole numbers up to {2**63 - 1}, got {(value or '')[:100]!r}")
    return [i for i in ids if i is not None]


def _job_query(params: Any) -> JobQuery:
    """The job list's filters from a query string; ValueError for a bad one."""
    def text(key: str) -> Optional[str]:
        value = str(params.get(key) or "")
        return (value.strip() if key == "q" else value) or None

    before = text("before")
    if before is not None and _job_id(before) is None:
        raise ValueError("before must be a job id")
    return JobQuery(state=text("state") or "all", queue=text("queue"), name=text("name"), search=text("q"),
                    before=None if before is None else _job_id(before))


# What an action's redirect may ask the next page to say: fixed texts, filled
# with a count only, so that a link cannot make the console say anything
# else (a phishing line in the success banner, say).
BANNERS: dict[str, str] = {
    "sweep": "sweep: recovered {n} claim(s)",
    "retry-dead": "retry-dead: {n} job(s)",
    "delete-dead": "delete-dead: {n} job(s)",
    "requeue": "requeue: {n} job(s)",
    "pause": "pause: {done}",
    "resume": "resume: {done}",
    "limit": "limit: {done}",
    "run-now": "run-now: {done}",
    "enable-task": "enable-task: {done}",
    "disable-task": "disable-task: {done}",
    "release-lease": "release-lease: {done}",
}


def _outcome(command: str, done: Any) -> dict[str, str]:
    """The query of the redirect after `command` did `done`."""
    if command == "sweep":
        return {"done": command, "n": str(len(done["recovered"]))}
    if isinstance(done, bool) or done is None:  # None: set_queue_limit returns nothing, having done it
        return {"done": command, "n": "0" if done is False else "1"}
    return {"done": command, "n": str(int(done or 0))}


def banner(query: Any) -> Optional[str]:
    """The banner a redirect's query asks for; None for anything not made by _outcome."""
    text, n = BANNERS.get(query.get("done") or ""), query.get("n") or ""
    if text is None or not (n.isascii() and n.isdigit() and len(n) <= 18):
        return None
    if "{done}" in text:
        return text.format(done={"0": "nothing to do", "1": "done"}.get(n, n))
    return text.format(n=int(n))


def create_app(dsn: str = "", pool_size: int = 4, allowed_hosts: Optional[list[str]] = None) -> Starlette:
    """The console as an ASGI application. It answers Host headers of
    loopback names and `allowed_hosts` only, which stops DNS rebinding."""
    console = Console(dsn, pool_size)

    def page(name: str) -> Callable[[Request], Awaitable[Response]]:
        read = getattr(pages, name)

        async def endpoint(request: Request) -> Response:
            return await console.page(request, name, read)
        return endpoint

    async def job(request: Request) -> Response:
        job_id = _job_id(str(request.path_params["job_id"]))
        if job_id is None:
            return console.html("error.html", 404, page="job", error="No such job: job ids are whole numbers.")
        return await console.page(request, "job", lambda conn: pages.job(conn, job_id))

    async def jobs(request: Request) -> Response:
        try:
            query = _job_query(request.query_params)
        except ValueError as error:
            return console.html("error.html", 400, page="jobs", error=str(error))
        return await console.page(request, "jobs", lambda conn: pages.jobs(conn, query))

    async def tasks(request: Request) -> Response:
        raw_after = request.query_params.get("after")
        after = None if raw_after is None else _task_id(raw_after)
        if raw_after is not None and after is None:
            return console.html("error.html", 400, page="tasks", error="after= takes a task id.")
        return await console.page(request, "tasks", lambda conn: pages.tasks(conn, after))

    async def task(request: Request) -> Response:
        task_id = _task_id(str(request.path_params["task_id"]))
        if task_id is None:
            return console.html("error.html", 404, page="task", error="No such task: task ids are whole numbers.")
        raw_before = request.query_params.get("before")
        before = reads.NEWEST if raw_before is None else _job_id(raw_before)
        if before is None:
            return console.html("error.html", 400, page="task", error="before= takes a run id.")
        return await console.page(request, "task", lambda conn: pages.task(conn, task_id, before))

    scraped = metrics.registry(console.pool)

    async def exposition(request: Request) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        body = await run_in_threadpool(generate_latest, scraped)
        return Response(body, media_type=CONTENT_TYPE_LATEST, headers={"Cache-Control": "no-store"})

    async def action(request: Request) -> Response:
        command = str(request.path_params["command"])
        # Ticked rows each send an id: they are one field from here on.
        form = {k: ",".join(v) if k == "ids" else v[0]
                for k, v in parse_qs((await request.body()).decode("utf-8", "replace"), keep_blank_values=True).items()}
        if not secrets.compare_digest(form.get("token", ""), console.token):
            return console.html("error.html", 403, page="action",
                                error="The form is stale or not from this console: reload the page.")
        back = _local_path(form.get("back"))

        def work(conn: psycopg.Connection[Any]) -> dict[str, Any]:
            if not actions.may_act(conn):
                raise Forbidden()
            ids = _ids(form.get("ids"))
            if form.get("selection") == "ticked" and not ids:
                raise ValueError("No job is ticked: tick the jobs to act on.")
            planned = actions.plan(conn, command, queue=form.get("queue") or None, ids=ids,
                                   name=form.get("name") or None, task_id=_form_task_id(form.get("task_id")),
                                   timeout_minutes=_minutes(form.get("timeout_minutes")))
            if form.get("confirmed") != "yes":
                return {"question": planned.question}
            return {"done": actions.perform(conn, planned)}

        try:
            outcome = await run_in_threadpool(console.read, work)
        except (Forbidden, psycopg.errors.InsufficientPrivilege):
            return console.html("error.html", 403, page="action",
                                error="This role does not have the admin capability; the console is read-only.")
        except ValueError as error:
            return console.html("error.html", 400, page="action", error=str(error))
        except (psycopg.Error, reads.NotInstalled) as error:
            return console.html("error.html", 503, page="action", error=str(error).strip())
        if "question" in outcome:
            fields = {k: v for k, v in form.items() if k not in ("token", "confirmed")}
            return console.html("confirm.html", page="action", admin=True, command=command,
                                question=outcome["question"], fields=fields, back=back)
        joined = "&" if "?" in back else "?"
        return RedirectResponse(f"{back}{joined}{urlencode(_outcome(command, outcome['done']))}", status_code=303,
                                headers=HEADERS)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await run_in_threadpool(console.pool.open)
        try:
            yield
        finally:
            await run_in_threadpool(console.pool.close)

    hosts = [*LOOPBACK_HOSTS, *(allowed_hosts or [])]
    static = StaticFiles(packages=[("pg_distlock.console", "static")])
    routes = [
        *(Route(path, {"jobs": jobs, "tasks": tasks}.get(name) or page(name)) for name, (path, _) in PAGES.items()),
        Route("/jobs/{job_id}", job),
        Route("/tasks/{task_id}", task),
        Route("/actions/{command}", action, methods=["POST"]),
        Route("/metrics", exposition),
        Mount("/static", static, name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=hosts)])
    app.state.console = console
    return app
