"""What each page shows, read in one short autocommit statement at a time:
the console never holds a transaction (or a lock) between refreshes."""

from __future__ import annotations

from typing import Any, Optional
from urllib.parse import urlencode

import psycopg

from ..inspect import actions, jobs as job_list, reads
from . import charts, graph

DEAD_JOBS_SHOWN = 20
TASKS_SHOWN = 20
CLAIMS_SHOWN = 100
LOCK_STATS_SHOWN = 50


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


def job(conn: psycopg.Connection[Any], job_id: int) -> dict[str, Any]:
    admin = actions.may_act(conn)
    rows = reads.job(conn, job_id) if admin else None
    # 403 without the admin capability (whether the job exists is not
    # said), 404 for an id no job has (any more).
    status = 403 if rows is None else 200 if rows else 404
    return {"admin": admin, "job_id": job_id, "job": rows[0] if rows else None, "readable": rows is not None,
            "http_status": status}


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
