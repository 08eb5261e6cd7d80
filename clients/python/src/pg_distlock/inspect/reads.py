"""What the commands read: pg_distlock's views, as a monitor role may. Each
function is one short statement in autocommit; a view the connected role
may not read gives None (shown as such), not an error."""

from __future__ import annotations

from typing import Any, Optional

import psycopg
from psycopg.abc import Params
from psycopg.rows import dict_row

Rows = list[dict[str, Any]]


class NotInstalled(Exception):
    pass


def _rows(conn: psycopg.Connection[Any], sql: str, params: Params = ()) -> Optional[Rows]:
    """The rows of `sql`; None when the role may not read what it names, or
    the installed version does not have it yet."""
    try:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, params)
            return list(cur.fetchall())
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedTable):
        return None


def require_installed(conn: psycopg.Connection[Any]) -> None:
    row = conn.execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_distlock'").fetchone()
    if row is None:
        database = conn.info.dbname
        raise NotInstalled(f'pg_distlock is not installed in database "{database}" (CREATE EXTENSION pg_distlock)')


STATUS_SQL = """
SELECT (SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pg_distlock') AS extension_version,
       (SELECT default_version FROM pg_catalog.pg_available_extensions WHERE name = 'pg_distlock') AS library_version,
       pg_catalog.current_setting('server_version') AS server_version,
       pg_catalog.current_setting('server_version_num')::int AS server_version_num,
       pg_catalog.current_setting('distlock.dynamic_shared_memory', true) AS dynamic_shared_memory,
       pg_catalog.pg_is_in_recovery() AS standby,
       pg_catalog.current_database() AS database
"""

# shared_preload_libraries is readable by superusers and pg_read_all_settings
# (pg_monitor) only.
PRELOADED_SQL = """
SELECT 'pg_distlock' = ANY (pg_catalog.string_to_array(
           pg_catalog.replace(pg_catalog.current_setting('shared_preload_libraries'), ' ', ''), ',')) AS preloaded
"""


def _one(conn: psycopg.Connection[Any], sql: str) -> Optional[dict[str, Any]]:
    rows = _rows(conn, sql)
    if rows is None:
        return None
    return rows[0] if rows else {}


def storage(server: dict[str, Any]) -> str:
    """Where rate limits, snowflake state, lock telemetry and wake-ups live."""
    if server.get("preloaded") is None:
        return "unknown (reading shared_preload_libraries needs pg_read_all_settings)"
    if server["preloaded"]:
        return "shared memory (preloaded)"
    if server["server_version_num"] >= 170000 and server["dynamic_shared_memory"] != "off":
        return "shared memory (DSM registry)"
    return "tables"


def queue_totals(rows: Optional[Rows]) -> Optional[dict[str, Any]]:
    """The queues' rows summed: how many queues, jobs by status, how many paused."""
    if rows is None:
        return None
    totals = {"queues": len(rows)}
    for status in ("pending", "processing", "failed", "dead"):
        totals[status] = sum(int(row[status]) for row in rows)
    totals["paused"] = sum(1 for row in rows if row["paused"])
    return totals


def status(conn: psycopg.Connection[Any], queue_rows: Optional[Rows] = None) -> dict[str, Any]:
    """One screen's numbers; `queue_rows` are distlock.queues' rows when the
    caller has read them already (the view is the costliest read here)."""
    server = _one(conn, STATUS_SQL) or {}
    server["preloaded"] = (_one(conn, PRELOADED_SQL) or {}).get("preloaded")
    server["storage"] = storage(server)
    return {
        "server": server,
        "claims": _one(conn, """
            SELECT count(*) AS running,
                   count(*) FILTER (WHERE past_timeout) AS past_timeout,
                   count(*) FILTER (WHERE NOT holder_alive
                                      OR (pg_catalog.to_jsonb(r) ->> 'lease_backend_alive') = 'false') AS holder_gone
              FROM distlock.running_tasks r"""),
        "waits": _one(conn, "SELECT count(DISTINCT blocked_pid) AS waiting_sessions FROM distlock.lock_waits"),
        "queues": queue_totals(queues(conn) if queue_rows is None else queue_rows),
        "leases": _one(conn, "SELECT count(*) FILTER (WHERE is_held) AS held, count(*) AS known FROM distlock.leases"),
        "leaders": _one(conn, "SELECT count(*) FILTER (WHERE is_current) AS current, count(*) AS groups FROM distlock.leaders"),
        "sweep": _one(conn, "SELECT last_run_at, since_last_run, last_recovered, runs FROM distlock.sweep_status"),
    }


# A running claim's holder in words: alive; a lease-mode claim whose lease
# runs on while the backend that made or last renewed it is gone (a crashed
# worker, until its lease runs out); a lease that ran out; gone. The columns
# that older servers' running_tasks lacks (lease_expires_at before 0.2.0,
# lease_backend_alive before 0.4.0) are read through to_jsonb, so every
# server answers.
HOLDER_STATE = """
    CASE WHEN r.task_id IS NULL THEN NULL
         WHEN r.holder_alive AND (pg_catalog.to_jsonb(r) ->> 'lease_backend_alive') = 'false'
              THEN 'lease live, connection gone'
         WHEN r.holder_alive THEN 'alive'
         WHEN r.holder_pid IS NULL
              AND (pg_catalog.to_jsonb(r) ->> 'lease_expires_at')::timestamptz <= pg_catalog.clock_timestamp()
              THEN 'lease expired'
         ELSE 'gone' END"""


# The zone a task's schedule follows (task_schedule.schedule_timezone, 0.4.0),
# read through to_jsonb so that older servers answer too: UTC, as they run.
TASK_ZONE = """
    CROSS JOIN LATERAL (SELECT COALESCE(pg_catalog.to_jsonb(s) ->> 'schedule_timezone', 'UTC') AS timezone) z"""

# What the task does with missed slots, and how many it skipped (0.4.0; a
# server before it has neither: 'once', as it behaves, and no count).
TASK_MISSED = """
    CROSS JOIN LATERAL (SELECT COALESCE(pg_catalog.to_jsonb(s) ->> 'missed_runs', 'once') AS missed_runs,
                               (pg_catalog.to_jsonb(s) ->> 'missed_runs_grace')::interval AS missed_runs_grace,
                               (pg_catalog.to_jsonb(s) ->> 'missed_runs_max')::integer AS missed_runs_max,
                               (pg_catalog.to_jsonb(s) ->> 'runs_skipped')::bigint AS runs_skipped) m"""


def tasks(conn: psycopg.Connection[Any]) -> Optional[Rows]:
    """Each task with its running claims; its next run also on the wall clock
    of the zone its schedule follows, named."""
    # task_schedule, not task_stats: nothing here needs each task's log counted.
    return _rows(conn, """
        SELECT s.task_id, s.task_name, s.task_type, s.is_enabled AS enabled, s.next_run_at,
               pg_catalog.timezone(z.timezone, s.next_run_at) AS next_run_local, z.timezone, s.last_status,
               s.last_run_at, r.worker_id AS running_worker, r.running_for, r.fencing_token,
               r.holder_alive, """ + HOLDER_STATE + """ AS holder, r.past_timeout
          FROM distlock.task_schedule s""" + TASK_ZONE + """
          LEFT JOIN distlock.running_tasks r ON r.task_id = s.task_id
         ORDER BY s.task_name, r.started_at""")


def locks(conn: psycopg.Connection[Any]) -> Optional[Rows]:
    return _rows(conn, """
        SELECT pid, application_name AS application, mode, granted,
               coalesce(task_name, key_name, key::text, key1 || ',' || key2) AS lock,
               key_kind, held_for, waiting_for
          FROM distlock.advisory_locks
         ORDER BY lock, granted DESC, waiting_for DESC NULLS LAST, pid""")


def lock_owners_published(conn: psycopg.Connection[Any]) -> bool:
    """Whether this server has distlock.lock_owner(pid) (the `distlock.owner`
    a session published) and the role may call it."""
    row = conn.execute("SELECT pg_catalog.has_function_privilege("
                       "pg_catalog.to_regprocedure('distlock.lock_owner(integer)'), 'EXECUTE')").fetchone()
    return bool(row and row[0])


# Advisory locks other than task locks (claims are shown as claims), with
# the owner their session published: asked once per session.
OWNED_LOCKS_SQL = """
    WITH l AS (SELECT pid, application_name AS application, mode, granted,
                      coalesce(key_name, key::text, key1 || ',' || key2) AS lock, key_kind, held_for, waiting_for
                 FROM distlock.advisory_locks WHERE NOT is_task_lock),
         o AS (SELECT p.pid, {owner} AS owner FROM (SELECT DISTINCT pid FROM l) p)
    SELECT l.*, o.owner FROM l JOIN o USING (pid)
     ORDER BY o.owner, l.lock, l.granted DESC, l.pid"""


def owned_locks(conn: psycopg.Connection[Any], owners: bool) -> Optional[Rows]:
    """Advisory locks held or awaited, each with its session's owner; with
    `owners` false (a server without distlock.lock_owner) owner is NULL."""
    if owners:
        try:
            return _rows(conn, OWNED_LOCKS_SQL.format(owner="distlock.lock_owner(p.pid)"))
        except psycopg.errors.UndefinedFunction:
            pass  # dropped since asked (an extension downgrade): by pid only
    return _rows(conn, OWNED_LOCKS_SQL.format(owner="NULL::text"))


def jobs_by_worker(conn: psycopg.Connection[Any], ids: int) -> Optional[Rows]:
    """Processing jobs per worker id: how many, the oldest's start, the
    first `ids` ids (admin: distlock.task_queue)."""
    return _rows(conn, """
        SELECT worker_id, count(*) AS jobs, min(started_at) AS oldest_started,
               (pg_catalog.array_agg(id ORDER BY id))[1:%s] AS ids
          FROM distlock.task_queue WHERE status = 'processing'
         GROUP BY worker_id ORDER BY worker_id""", (ids,))


def waits(conn: psycopg.Connection[Any]) -> Optional[Rows]:
    """Edges of the wait-for graph: blocked_pid waits for blocking_pid. Each
    side's owner (distlock.owner; NULL for a backend without one) is read
    through to_jsonb, since servers before 0.4.0 have no such columns: every
    server answers, an older one with NULL."""
    return _rows(conn, """
        SELECT w.blocked_pid, w.blocked_application, w.blocking_pid, w.blocking_application, w.locktype,
               coalesce(w.task_name, a.key_name, w.key::text, w.key1 || ',' || w.key2) AS lock, w.waiting_for,
               j.cols ->> 'blocked_owner' AS blocked_owner, j.cols ->> 'blocking_owner' AS blocking_owner
          FROM distlock.lock_waits w
         CROSS JOIN LATERAL (SELECT pg_catalog.to_jsonb(w) AS cols) j
          LEFT JOIN LATERAL (SELECT l.key_name FROM distlock.advisory_locks l
                              WHERE l.pid = w.blocked_pid AND NOT l.granted LIMIT 1) a ON true
         ORDER BY w.blocking_pid, w.waiting_for DESC""")


def queues(conn: psycopg.Connection[Any]) -> Optional[Rows]:
    return _rows(conn, """
        SELECT name, paused, max_processing, pending, processing, failed, dead, completed_last_hour, oldest_pending_age
          FROM distlock.queues ORDER BY name""")


def dead_jobs(conn: psycopg.Connection[Any], limit: int) -> Optional[Rows]:
    return _rows(conn, """
        SELECT id, queue, task_name, attempts, completed_at AS died_at, last_error
          FROM distlock.task_queue WHERE status = 'dead'
         ORDER BY completed_at DESC NULLS LAST, id DESC LIMIT %s""", (limit,))


def count_dead(conn: psycopg.Connection[Any], queue: Optional[str], ids: list[int]) -> Optional[int]:
    return count_jobs(conn, "dead", queue, ids)


def count_jobs(conn: psycopg.Connection[Any], status: str, queue: Optional[str], ids: list[int]) -> Optional[int]:
    """How many unfinished jobs in `status` an action on `queue` and `ids` would touch."""
    rows = _rows(conn, """
        SELECT count(*) AS n FROM distlock.task_queue
         WHERE status = %s AND (%s::text IS NULL OR queue = %s)
           AND (%s::bigint[] IS NULL OR id = ANY (%s::bigint[]))""", (status, queue, queue, ids or None, ids or None))
    return None if rows is None else int(rows[0]["n"])


def leases(conn: psycopg.Connection[Any]) -> Optional[Rows]:
    return _rows(conn, """
        SELECT kind, name, owner, token, acquired_at, expires_at, is_held, remaining
          FROM distlock.leases ORDER BY name, kind, owner""")


def leaders(conn: psycopg.Connection[Any]) -> Optional[Rows]:
    return _rows(conn, """
        SELECT group_name, leader, term, elected_at, expires_at, is_current, remaining
          FROM distlock.leaders ORDER BY group_name""")


def task_counts(conn: psycopg.Connection[Any]) -> Optional[dict[str, Any]]:
    return _one(conn, """
        SELECT count(*) AS tasks, count(*) FILTER (WHERE is_enabled) AS enabled,
               count(*) FILTER (WHERE is_running) AS running,
               count(*) FILTER (WHERE last_status = 'failed') AS last_failed
          FROM distlock.task_schedule""")


# A task due this long ago and not running: no worker is claiming it.
OVERDUE_AFTER = "1 minute"
# Whether task_schedule's row `s` is overdue.
OVERDUE = f"""coalesce(s.is_enabled AND s.next_run_at < pg_catalog.now() - interval '{OVERDUE_AFTER}'
                        AND NOT s.is_running, false)"""


def next_tasks(conn: psycopg.Connection[Any], limit: int) -> Optional[Rows]:
    """The enabled tasks due next, each flagged overdue when no worker took it in time."""
    return _rows(conn, """
        SELECT s.task_id, s.task_name, s.task_type, s.schedule_cron, s.next_run_at, s.last_status, s.last_run_at,
               s.consecutive_failures, """ + OVERDUE + """ AS overdue
          FROM distlock.task_schedule s
         WHERE s.is_enabled
         ORDER BY s.next_run_at NULLS LAST, s.task_id LIMIT %s""", (limit,))





def task_definition(conn: psycopg.Connection[Any], task_id: int) -> Optional[Rows]:
    """One task as distlock.task_schedule shows it (no row: no such task),
    with its time zone and its next and last run on that zone's wall clock."""
    return _rows(conn, """
        SELECT s.task_id, s.task_name, s.task_type, s.schedule_cron, s.is_enabled AS enabled, s.next_run_at,
               s.last_run_at, s.last_status, s.consecutive_failures, s.timeout, s.is_running, s.runs_completed,
               s.runs_failed, s.runs_timed_out, s.runs_abandoned, """ + OVERDUE + """ AS overdue, z.timezone,
               pg_catalog.timezone(z.timezone, s.next_run_at) AS next_run_local,
               pg_catalog.timezone(z.timezone, s.last_run_at) AS last_run_local,
               m.missed_runs, m.missed_runs_grace, m.missed_runs_max, m.runs_skipped
          FROM distlock.task_schedule s""" + TASK_ZONE + TASK_MISSED + """ WHERE s.task_id = %s::integer""", (task_id,))


def task_list(conn: psycopg.Connection[Any], after: Optional[int], limit: int) -> Optional[Rows]:
    """Tasks by name after task `after` (its name, then id: a keyset), `limit`
    of them, each with its newest running claim beside it, flagged overdue."""
    return _rows(conn, """
        SELECT s.task_id, s.task_name, s.task_type, s.schedule_cron, s.is_enabled AS enabled, s.next_run_at,
               s.last_run_at, s.last_status, s.consecutive_failures, """ + OVERDUE + """ AS overdue,
               r.worker_id AS running_worker, r.fencing_token, r.running_for, """ + HOLDER_STATE + """ AS holder,
               r.past_timeout
          FROM distlock.task_schedule s
          LEFT JOIN (SELECT DISTINCT ON (c.task_id) c.* FROM distlock.running_tasks c
                      ORDER BY c.task_id, c.started_at DESC) r ON r.task_id = s.task_id
         WHERE %(after)s::integer IS NULL
            OR (s.task_name, s.task_id) > (SELECT a.task_name, a.task_id FROM distlock.task_schedule a
                                            WHERE a.task_id = %(after)s::integer)
         ORDER BY s.task_name, s.task_id LIMIT %(limit)s""", {"after": after, "limit": limit})


def task_claims(conn: psycopg.Connection[Any], task_id: int) -> Optional[Rows]:
    """The task's running claims: its live one, and any another claim replaced
    that the sweep has not ended yet."""
    return _rows(conn, """
        SELECT r.worker_id, r.fencing_token, r.attempt, r.started_at, r.running_for, r.timeout, r.past_timeout,
               """ + HOLDER_STATE + """ AS holder
          FROM distlock.running_tasks r WHERE r.task_id = %s::integer ORDER BY r.started_at DESC""", (task_id,))


def task_settings(conn: psycopg.Connection[Any], task_id: int) -> Optional[Rows]:
    """What task_schedule leaves out of a task's definition (admin: the table itself)."""
    return _rows(conn, """
        SELECT max_retries, retry_delay, created_at FROM distlock.scheduled_tasks WHERE id = %s::integer""", (task_id,))


def next_runs(conn: psycopg.Connection[Any], cron: str, count: int, timezone: str = "UTC") -> Optional[Rows]:
    """The next `count` occurrences of `cron` from now on the wall clock of
    `timezone`, distlock.cron_next applied to each in turn (fewer when the
    expression has no more), each as an instant (`at`) and as that zone's
    wall-clock time (`local`). A server before 0.4.0 evaluates in UTC only."""
    if timezone == "UTC":
        return _rows(conn, """
            WITH RECURSIVE slot (n, at) AS (
                SELECT 1, distlock.cron_next(%s::text, pg_catalog.now())
                UNION ALL
                SELECT n + 1, distlock.cron_next(%s::text, at) FROM slot WHERE n < %s AND at IS NOT NULL)
            SELECT at, pg_catalog.timezone('UTC', at) AS local FROM slot WHERE at IS NOT NULL ORDER BY n""",
                     (cron, cron, count))
    return _rows(conn, """
        WITH RECURSIVE slot (n, at) AS (
            SELECT 1, distlock.cron_next(%(cron)s::text, pg_catalog.now(), %(zone)s::text)
            UNION ALL
            SELECT n + 1, distlock.cron_next(%(cron)s::text, at, %(zone)s::text) FROM slot
             WHERE n < %(count)s AND at IS NOT NULL)
        SELECT at, pg_catalog.timezone(%(zone)s::text, at) AS local FROM slot WHERE at IS NOT NULL ORDER BY n""",
                 {"cron": cron, "zone": timezone, "count": count})


# A run id above every other: the history's first page.
NEWEST = 2**63 - 1


# How many log ids a task page reads at most: the log has no index by task,
# so a task that rarely runs among many that often do would make every
# refresh walk the whole log (a page a few million runs deep, every 5 s).
TASK_LOG_WINDOW = 20_000

TASK_RUNS_SQL = """
        SELECT id, started_at, completed_at, coalesce(completed_at, pg_catalog.now()) - started_at AS duration,
               status::text AS status, worker_id, fencing_token, attempt, error_message, scheduled_for
          FROM distlock.task_execution_log
         WHERE task_id = %(task)s::integer AND id < %(top)s::bigint AND id >= %(floor)s::bigint
         ORDER BY id DESC LIMIT %(limit)s"""


def task_runs(conn: psycopg.Connection[Any], task_id: int, before: int, limit: int
              ) -> Optional[tuple[Rows, Optional[int]]]:
    """The task's runs with ids below `before`, newest first, among the
    TASK_LOG_WINDOW log ids below it (admin: workers' error messages are
    their data); with where to go on when the window ran out before `limit`
    runs were found (None: the log has nothing older)."""
    found = _rows(conn, """
        SELECT least(%s::bigint, coalesce(max(id) + 1, 0)) AS top, min(id) AS lowest
          FROM distlock.task_execution_log""", (before,))
    if not found:
        return None
    bounds = found[0]
    top, lowest = int(bounds["top"]), bounds["lowest"]
    floor = max(top - TASK_LOG_WINDOW, 0)
    rows = _rows(conn, TASK_RUNS_SQL, {"task": task_id, "top": top, "floor": floor, "limit": limit})
    if rows is None:
        return None
    return rows, (floor if lowest is not None and floor > int(lowest) else None)


def running_claims(conn: psycopg.Connection[Any], limit: int) -> Optional[Rows]:
    return _rows(conn, """
        SELECT task_id, task_name, worker_id, fencing_token, attempt, started_at, running_for, holder_alive,
               """ + HOLDER_STATE + """ AS holder, past_timeout, timeout
          FROM distlock.running_tasks r ORDER BY started_at LIMIT %s""", (limit,))


def throughput(conn: psycopg.Connection[Any]) -> Optional[Rows]:
    """Per minute of the last hour, over every queue the role may see."""
    return _rows(conn, """
        SELECT (extract(epoch FROM date_trunc('minute', now()) - minute) / 60)::int AS minutes_ago,
               sum(completed)::bigint AS completed, sum(died)::bigint AS died
          FROM distlock.queue_throughput GROUP BY minute ORDER BY minute""")


def latency(conn: psycopg.Connection[Any]) -> Optional[Rows]:
    return _rows(conn, """
        SELECT queue, jobs, wait_p50, wait_p95, wait_p99, wait_max FROM distlock.queue_latency ORDER BY queue""")


def lock_stats(conn: psycopg.Connection[Any], limit: int) -> Optional[Rows]:
    return _rows(conn, """
        SELECT key, name, acquisitions, failed_tries, waits, timeouts, total_wait, max_wait, mean_wait,
               current_holders, longest_current_hold, last_used
          FROM distlock.lock_stats
         ORDER BY waits + timeouts DESC, acquisitions DESC, key LIMIT %s""", (limit,))


def job_attempts(conn: psycopg.Connection[Any], job_id: int, shown: int, error_chars: int) -> Optional[Rows]:
    """The `shown` newest attempts of a job that ended without success
    (failed, expired, requeued, dead), each error cut to `error_chars`
    characters (`error_cut` says so); None without the admin capability or
    before 0.4.0, whose server keeps only a job's last error."""
    return _rows(conn, """
        SELECT attempt, outcome, worker_id, started_at, ended_at, ended_at - started_at AS took,
               pg_catalog.left(error, %(chars)s) AS error, pg_catalog.length(error) > %(chars)s AS error_cut
          FROM distlock.job_attempts WHERE job_id = %(job)s
         ORDER BY attempt DESC LIMIT %(shown)s""", {"job": job_id, "shown": shown, "chars": error_chars})


def job(conn: psycopg.Connection[Any], job_id: int) -> Optional[Rows]:
    """One job, queued or finished (admin: the payload is the caller's data).
    Its group (0.4.0) is read through to_jsonb: servers before have none."""
    return _rows(conn, """
        SELECT id, queue, task_name, status, payload, attempts, max_attempts, priority, worker_id, created_at,
               run_after, started_at, completed_at, lease_expires_at, last_error, unique_key,
               pg_catalog.to_jsonb(j) ->> 'group_key' AS group_key
          FROM distlock.jobs j WHERE id = %s""", (job_id,))
