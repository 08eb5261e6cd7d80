"""The admin calls (the admin capability, docs/privileges.md): pause, resume
and limit queues; retry, delete or take back jobs; force-release a lease;
run a task now; define a scheduled task.
Each is one server statement; the names and return values are its."""

from __future__ import annotations

from typing import Literal, Sequence, TypeVar

from . import effects as fx
from .base import Bound
from ..errors import InvalidArgument
from .keeper import Seconds, interval, non_negative

S = TypeVar("S")

# Each parameter cast to its argument's type: psycopg types a Python int by
# its value (bigint beyond int4), and the server knows no such function
# (42883) where a cast gives 22003, InvalidArgument.
PAUSE_SQL = "SELECT distlock.pause_queue(%s::text)"
RESUME_SQL = "SELECT distlock.resume_queue(%s::text)"
LIMIT_SQL = "SELECT distlock.set_queue_limit(%s::text, %s::integer)"
JOBS_SQL = {
    "retry_dead": "SELECT distlock.retry_dead_jobs(%s::text, %s::bigint[])",
    "delete_dead": "SELECT distlock.delete_dead_jobs(%s::text, %s::bigint[])",
    "requeue": "SELECT distlock.requeue_jobs(%s::text, %s::bigint[])",
}
RELEASE_LEASE_SQL = "SELECT distlock.force_release_lease(%s::text)"
RUN_NOW_SQL = "SELECT distlock.run_task_now(%s::integer)"
# A task by name, created or redefined (pg_distlock 0.4.0's columns). The
# table's trigger checks every value (22023 naming it) and recomputes the
# next slot when the schedule or its zone changed; a redefinition keeps the
# task's id, its slot otherwise, its runs and its counters.
DEFINE_TASK_SQL = """
    INSERT INTO distlock.scheduled_tasks AS t
           (task_name, task_type, schedule_cron, schedule_timezone, missed_runs, missed_runs_grace, missed_runs_max,
            is_enabled)
    VALUES (%s::text, %s::text, %s::text, %s::text, %s::text, %s::interval, %s::integer, %s::boolean)
    ON CONFLICT (task_name) DO UPDATE
       SET task_type = excluded.task_type, schedule_cron = excluded.schedule_cron,
           schedule_timezone = excluded.schedule_timezone, missed_runs = excluded.missed_runs,
           missed_runs_grace = excluded.missed_runs_grace, missed_runs_max = excluded.missed_runs_max,
           is_enabled = COALESCE(%s::boolean, t.is_enabled)
    RETURNING t.id"""
MissedRuns = Literal["once", "skip", "all"]


def _ids(ids: Sequence[int] | None) -> list[int] | None:
    if ids is None:
        return None
    if isinstance(ids, (str, bytes)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise InvalidArgument(f"ids must be a sequence of job ids (int), got {ids!r}")
    return list(ids)


class AdminLogic(Bound[S]):
    def _pause_op(self, queue: str) -> fx.Gen[bool]:
        return bool((yield from fx.first(PAUSE_SQL, (queue,))))

    def _resume_op(self, queue: str) -> fx.Gen[bool]:
        return bool((yield from fx.first(RESUME_SQL, (queue,))))

    def _set_limit_op(self, queue: str, max_processing: int | None) -> fx.Gen[None]:
        if max_processing is not None and (isinstance(max_processing, bool) or not isinstance(max_processing, int)):
            raise InvalidArgument(f"max_processing must be an int or None, got {max_processing!r}")
        yield from fx.execute(LIMIT_SQL, (queue, max_processing))

    def _jobs_op(self, action: str, queue: str | None, ids: Sequence[int] | None) -> fx.Gen[int]:
        return int((yield from fx.first(JOBS_SQL[action], (queue, _ids(ids)))) or 0)

    def _run_task_now_op(self, task_id: int) -> fx.Gen[bool]:
        if isinstance(task_id, bool) or not isinstance(task_id, int):
            raise InvalidArgument(f"task_id must be an int, got {task_id!r}")
        return bool((yield from fx.first(RUN_NOW_SQL, (task_id,))))

    def _define_task_op(
        self, name: str, task_type: str, schedule: str | None, timezone: str | None, missed_runs: MissedRuns,
        missed_runs_grace: Seconds | None, missed_runs_max: int | None, enabled: bool | None,
    ) -> fx.Gen[int]:
        required: tuple[tuple[object, str], ...] = ((name, "name"), (task_type, "task_type"), (missed_runs, "missed_runs"))
        optional: tuple[tuple[object, str], ...] = ((schedule, "schedule"), (timezone, "timezone"))
        for value, what in required + tuple(pair for pair in optional if pair[0] is not None):
            if not isinstance(value, str):
                raise InvalidArgument(f"{what} must be a str, got {value!r}")
        if missed_runs_max is not None and (isinstance(missed_runs_max, bool) or not isinstance(missed_runs_max, int)):
            raise InvalidArgument(f"missed_runs_max must be an int or None, got {missed_runs_max!r}")
        try:
            grace = None if missed_runs_grace is None else interval(non_negative(missed_runs_grace, "missed_runs_grace"))
        except (TypeError, ValueError, OverflowError) as exc:
            raise InvalidArgument(f"missed_runs_grace must be a number of seconds or a timedelta, got {missed_runs_grace!r}") from exc
        row = yield from fx.first(
            DEFINE_TASK_SQL,
            # A new task is enabled unless told; a redefinition keeps an
            # operator's disable unless `enabled` says otherwise.
            (name, task_type, schedule, timezone, missed_runs, grace, missed_runs_max,
             True if enabled is None else bool(enabled), None if enabled is None else bool(enabled)),
        )
        return int(row)

    def _release_lease_op(self, name: str) -> fx.Gen[bool]:
        return bool((yield from fx.first(RELEASE_LEASE_SQL, (name,))))
