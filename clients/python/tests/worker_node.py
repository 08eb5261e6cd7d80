"""A worker run as its own process, for the tests that signal it:

    python worker_node.py DSN KIND APPLICATION_NAME HANDLER_SECONDS [BATCH LEASE]

KIND: queue (a QueueWorker waiting 20 s in the server for jobs) | task (a
TaskWorker polling every 20 s). The handler prints `started ID`, sleeps
HANDLER_SECONDS, then returns; at the end the worker's stats are printed as
JSON. BATCH and LEASE (seconds) are the QueueWorker's (default 1 and 300). Signals are the worker's own handling (handle_signals=True)."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import pg_distlock


def main() -> int:
    dsn, kind, app, seconds = sys.argv[1:5]
    batch, lease = (int(sys.argv[5]), float(sys.argv[6])) if len(sys.argv) > 6 else (1, 300.0)

    def handler(item: Any) -> None:
        print(f"started {getattr(item, 'id', None) or item.task_id}", flush=True)
        time.sleep(float(seconds))

    conninfo = f"{dsn} application_name={app}"
    if kind == "queue":
        worker: Any = pg_distlock.QueueWorker(conninfo, handler, wait=20, batch=batch, lease=lease)
    else:
        worker = pg_distlock.TaskWorker(conninfo, handler, poll_interval=20)
    stats = worker.run()
    print(json.dumps(stats.__dict__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
