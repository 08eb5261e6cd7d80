"""What each page shows, read in one short autocommit statement at a time:
the console never holds a transaction (or a lock) between refreshes."""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlencode

import psycopg

from ..inspect import actions, jobs as job_list, reads, workers as by_worker
from . import charts, graph

DEAD_JOBS_SHOWN = 20
TASKS_LISTED = 200
TASKS_SHOWN = 20
CLAIMS_SHOWN = 100
LOCK_STATS_SHOWN = 50
TASK_RUNS_SHOWN = 50
NEXT_RUNS_SHOWN = 5
JOB_IDS_SHOWN = 10
# A job page lists its newest attempts, each error cut (a hostile worker
# can fail a job with megabytes of text).
ATTEMPTS_SHOWN = 100
ATTEMPT_ERROR_CHARS = 10_000


def overview(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    admin = actions.may_act(conn)
    queues = reads.queues(conn)
    throughput = reads.throughput(conn)
    return {
        "admin": admin,
        "status": reads.status(conn, queues),
        "queues": queues,
        "depth": charts.depth(queues) if queues else None,
        "throughput": throughput,
        "throughput_chart": charts.throughput(throughput) if throughput is not None else None,
        "latency": reads.latency(conn),
        "task_counts": reads.task_counts(conn),
        "next_tasks": reads.next_tasks(conn, TASKS_SHOWN),
        "claims": reads.running_claims(conn, CLAIMS_SHOWN),
        "dead_jobs": reads.dead_jobs(conn, DEAD_JOBS_SHOWN) if admin else None,
    }


def locks(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    waits = reads.waits(conn)
    unavailable = None
    try:
        stats = reads.lock_stats(conn, LOCK_STATS_SHOWN)
    except psycopg.errors.ObjectNotInPrerequisiteState as error:
        # Telemetry lives in shared memory, which this server does not give pg_distlock.
        stats, unavailable = [], error.diag.message_primary
    return {
        "admin": actions.may_act(conn),
        "locks": reads.locks(conn),
        "waits": waits,
        "graph": graph.layout(waits) if waits else None,
        "lock_stats": stats,
        "lock_stats_unavailable": unavailable,
    }


def coordination(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    leases = reads.leases(conn)
    return {
        "admin": actions.may_act(conn),
        "leases": leases,
        "semaphores": charts.semaphores(leases) if leases is not None else None,
        "leaders": reads.leaders(conn),
    }


def tasks(conn: psycopg.Connection[Any], after: Optional[int] = None) -> dict[str, Any]:
    """A page of tasks by name: a database with thousands of tasks must not
    send them all at every refresh."""
    rows = reads.task_list(conn, after, TASKS_LISTED + 1)
    return {"admin": actions.may_act(conn), "tasks": None if rows is None else rows[:TASKS_LISTED],
            "next_after": rows[TASKS_LISTED - 1]["task_id"] if rows is not None and len(rows) > TASKS_LISTED else None,
            "paged": after is not None}


def task(conn: psycopg.Connection[Any], task_id: int, before: int) -> dict[str, Any]:
    """One task: its definition, claims and next runs for every monitor; its
    runs, `before` and older, and the actions for admins."""
    admin = actions.may_act(conn)
    rows = reads.task_definition(conn, task_id)
    data: dict[str, Any] = {"admin": admin, "task_id": task_id, "task": rows[0] if rows else None,
                            "readable": rows is not None, "refreshes": True}
    if not rows:
        # 404 for an id no task has; 403 for a role that may read no task.
        data["http_status"] = 403 if rows is None else 404
        return data
    cron = rows[0]["schedule_cron"]
    found = reads.task_runs(conn, task_id, before, TASK_RUNS_SHOWN + 1) if admin else None
    runs, below_window = found if found is not None else (None, None)
    settings = reads.task_settings(conn, task_id) if admin else None
    data.update({
        "settings": settings[0] if settings else None,
        "claims": reads.task_claims(conn, task_id),
        "next_runs": reads.next_runs(conn, cron, NEXT_RUNS_SHOWN, rows[0]["timezone"]) if cron else [],
        "runs": None if runs is None else runs[:TASK_RUNS_SHOWN],
        # Past a full page, older runs go on below its last; short of one,
        # below the log ids the page looked through (reads.TASK_LOG_WINDOW).
        "older": (runs[TASK_RUNS_SHOWN - 1]["id"] if runs is not None and len(runs) > TASK_RUNS_SHOWN
                  else below_window),
        "window": reads.TASK_LOG_WINDOW,
        "window_ended": runs is not None and len(runs) <= TASK_RUNS_SHOWN and below_window is not None,
        "paged": before != reads.NEWEST,
    })
    return data


def workers(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """Each worker id with what it holds now. Jobs by worker need the admin
    capability (distlock.task_queue); a monitor gets the total processing."""
    admin = actions.may_act(conn)
    owners = reads.lock_owners_published(conn)
    claims, leases, leaders = reads.running_claims(conn, CLAIMS_SHOWN), reads.leases(conn), reads.leaders(conn)
    jobs = reads.jobs_by_worker(conn, JOB_IDS_SHOWN) if admin else None
    locks = reads.owned_locks(conn, owners)
    found, unowned = by_worker.group(claims, jobs, leases, leaders, locks)
    unreadable = [view for view, rows in (("distlock.running_tasks", claims), ("distlock.leases", leases),
                                          ("distlock.leaders", leaders), ("distlock.advisory_locks", locks))
                  if rows is None]
    totals = None if admin else reads.queue_totals(reads.queues(conn))
    return {"admin": admin, "workers": found, "unowned_locks": unowned, "lock_owners": owners,
            "unreadable": unreadable, "jobs_readable": jobs is not None,
            "processing": None if totals is None else totals["processing"],
            "claims_cut": claims is not None and len(claims) == CLAIMS_SHOWN, "claims_shown": CLAIMS_SHOWN}


def job(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    admin = actions.may_act(conn)
    rows = reads.job(conn, job_id) if admin else None
    # 403 without the admin capability (whether the job exists is not
    # said), 404 for an id no job has (any more).
    status = 403 if rows is None else 200 if rows else 404
    attempts = reads.job_attempts(conn, job_id, ATTEMPTS_SHOWN, ATTEMPT_ERROR_CHARS) if rows else None
    return {"admin": admin, "job_id": job_id, "job": rows[0] if rows else None, "readable": rows is not None,
            "attempts": attempts, "attempts_shown": ATTEMPTS_SHOWN, "http_status": status}


def _jobs_url(query: job_list.JobQuery, before: Optional[int]) -> str:
    """The list of `query`'s jobs older than `before` (None: the newest)."""
    params = {"state": query.state, "queue": query.queue, "name": query.name, "q": query.search, "before": before}
    return "/jobs?" + urlencode({k: v for k, v in params.items() if v is not None})


def jobs(conn: psycopg.Connection[Any], query: job_list.JobQuery) -> dict[str, Any]:
    admin = actions.may_act(conn)
    # 403 without the admin capability: rows carry the producers' data.
    found = job_list.page(conn, query) if admin else None
    return {"admin": admin, "readable": admin, "query": query, "found": found, "states": job_list.STATES,
            "error_chars": job_list.ERROR_CHARS, "here": _jobs_url(query, query.before),
            "older": _jobs_url(query, found.older) if found and found.older is not None else None,
            "newest": _jobs_url(query, None) if query.before is not None else None,
            "http_status": 200 if admin else 403}
