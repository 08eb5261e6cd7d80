"""Who holds what right now, by worker id: task claims, jobs processing,
leases, semaphore slots, leaderships and advisory locks.

Claims and jobs name their worker id as such. Holds and locks name an
owner, which the Python client makes from the worker id:
`<worker_id>/<host>:<pid>:<random>` for a lease, semaphore slot or
leadership (holds.default_owner), `<worker_id>/<host>:<pid>:<token>/thread-N`
(or `task-N`) for a lock (locks.lock_owner, the `distlock.owner` a session
publishes). An owner of another shape (given by the caller, or another
client's) is a worker of its own."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Optional

from .reads import Rows

_LOCK_OWNER = re.compile(r"(.+)/[^/]+/(?:thread|task)-[0-9]+", re.S)


def lock_owner_worker(owner: str) -> str:
    """The worker id of a lock owner: what precedes its last two '/'-separated
    parts when it ends in `/<process>/thread-N` or `/task-N`, else all of it."""
    found = _LOCK_OWNER.fullmatch(owner)
    return found.group(1) if found else owner


def hold_owner_worker(owner: str) -> str:
    """The worker id of a lease, semaphore or leader owner: what precedes
    its last '/', or all of it when it has none."""
    return owner.rpartition("/")[0] or owner


@dataclass
class Worker:
    worker_id: str
    claims: Rows = field(default_factory=list)
    jobs: Optional[dict[str, Any]] = None
    """Its processing jobs (admins only): how many, the oldest's start, the first ids."""
    leases: Rows = field(default_factory=list)
    slots: Rows = field(default_factory=list)
    leaderships: Rows = field(default_factory=list)
    locks: Rows = field(default_factory=list)


def group(claims: Optional[Rows], jobs: Optional[Rows], leases: Optional[Rows], leaders: Optional[Rows],
          locks: Optional[Rows]) -> tuple[list[Worker], Rows]:
    """The workers, by worker id, with what each holds now (expired leases
    and leaderships left out), and the locks of sessions that published no
    owner. A source that is None (unreadable) adds nothing."""
    workers: dict[str, Worker] = {}

    def worker(worker_id: str) -> Worker:
        if worker_id not in workers:
            workers[worker_id] = Worker(worker_id)
        return workers[worker_id]

    for claim in claims or []:
        worker(claim["worker_id"]).claims.append(claim)
    for row in jobs or []:
        worker(row["worker_id"] or "").jobs = row
    for lease in leases or []:
        if lease["is_held"]:
            held = worker(hold_owner_worker(lease["owner"]))
            (held.leases if lease["kind"] == "lease" else held.slots).append(lease)
    for leader in leaders or []:
        if leader["is_current"]:
            worker(hold_owner_worker(leader["leader"])).leaderships.append(leader)
    unowned: Rows = []
    for lock in locks or []:
        if lock["owner"] is None:
            unowned.append(lock)
        else:
            worker(lock_owner_worker(lock["owner"])).locks.append(lock)
    return [workers[key] for key in sorted(workers)], unowned
