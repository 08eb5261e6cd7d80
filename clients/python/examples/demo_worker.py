"""One worker of the Python fleet in scripts/demo.sh: runs due tasks until
none is left, and records each task's result with its fencing token, which a
trigger checks, so a worker that lost its claim could not record anything.

    python demo_worker.py CONNINFO WORKER_ID
"""

from __future__ import annotations

import random
import sys
import time

import psycopg

import pg_distlock


def main() -> None:
    conninfo, worker_id = sys.argv[1], sys.argv[2]
    with psycopg.connect(conninfo, autocommit=True) as results:

        def run_task(claim: pg_distlock.TaskClaim) -> None:
            time.sleep(0.01 + random.random() * 0.02)  # the task's real work
            claim.check()
            results.execute(
                "INSERT INTO demo_results (task_id, fencing_token, worker_id) VALUES (%s, %s, %s)",
                (claim.task_id, claim.token, worker_id),
            )

        stats = pg_distlock.TaskWorker(conninfo, run_task, worker_id=worker_id, exit_when_idle=True).run()
    print(f"{worker_id}: {stats.completed} completed, {stats.failed} failed, {stats.lost} lost")


if __name__ == "__main__":
    main()
