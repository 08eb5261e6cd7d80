"""The admin calls (the admin capability, docs/privileges.md): pause, resume
and limit queues; retry, delete or take back jobs; force-release a lease;
run a task now.
Each is one server function; the names and return values are its."""

from __future__ import annotations

from typing import Sequence, TypeVar

from . import effects as fx
from .base import Bound
from ..errors import InvalidArgument

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

    def _release_lease_op(self, name: str) -> fx.Gen[bool]:
        return bool((yield from fx.first(RELEASE_LEASE_SQL, (name,))))
