"""The jobs a QueueWorker holds, their leases renewed while they wait or run.

One renewer extends every held job's lease every `every` seconds; one
watchdog sets a job's `lost` event once its lease may have run out with no
extension confirmed, even while an extension hangs on a dead connection.
A job's deadline counts from when its claim or extension was sent, before
the server stamped the expiry, so it never outlives the server's view.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from . import effects as fx
from . import telemetry
from ..errors import Unavailable

if TYPE_CHECKING:
    from .queue import Job

log = telemetry.logger("queue")


class HeldJobs:
    def __init__(self, lease: float, every: float, extend: Callable[[Job], fx.Gen[bool]], stop: fx.Flag) -> None:
        self.lease = lease
        self.every = every
        self._extend = extend
        self._stop = stop
        self._deadlines: dict[int, float] = {}
        self._jobs: dict[int, Job] = {}

    def add(self, jobs: list[Job], sent: float) -> None:
        for job in jobs:
            self._deadlines[job.id] = sent + self.lease
            self._jobs[job.id] = job

    def discard(self, job: Job) -> None:
        self._jobs.pop(job.id, None)
        self._deadlines.pop(job.id, None)

    def _lose(self, job: Job, why: str) -> None:
        if job.lost is not None and not job.lost.is_set():
            job.lost.set()
            log.warning("pg_distlock: job %s (%s) lost: %s", job.id, job.name, why)

    def renewing(self) -> fx.Gen[None]:
        delay = self.every
        while not (yield fx.Sleep(delay, self._stop)):
            delay = self.every
            for job in list(self._jobs.values()):
                if job.lost is not None and job.lost.is_set():
                    continue
                sent = time.monotonic()
                try:
                    held = yield from self._extend(job)
                except Unavailable as exc:
                    # The job is still ours until its deadline; a reconnect or a
                    # failover may well come before it.
                    log.info("pg_distlock: extending job %s failed, retrying: %s", job.id, exc)
                    delay = min(self.every, 0.5)
                    break
                except Exception as exc:
                    self._lose(job, f"its lease could not be extended: {exc}")
                    continue
                if not held:
                    self._lose(job, "the server no longer has it as this worker's")
                elif job.id in self._deadlines:
                    self._deadlines[job.id] = max(self._deadlines[job.id], sent + self.lease)

    def watching(self) -> fx.Gen[None]:
        while True:
            now = time.monotonic()
            wake = now + self.every
            for job_id, deadline in list(self._deadlines.items()):
                job = self._jobs.get(job_id)
                if job is None:
                    continue
                if deadline <= now:
                    self._lose(job, f"no extension confirmed within its lease of {self.lease:g} s")
                else:
                    wake = min(wake, deadline)
            if (yield fx.Sleep(wake - now, self._stop)):
                return
