"""A worker run as its own process, for the tests that signal it:

    python worker_node.py DSN KIND APPLICATION_NAME HANDLER_SECONDS [BATCH LEASE [CONCURRENCY]]

KIND: queue (a QueueWorker waiting 20 s in the server for jobs) | queue-tx
(the same, its handler writing a row to public.effects and completing the
job in that row's transaction) | task (a TaskWorker polling every 20 s). The
handler prints `started ID`, sleeps HANDLER_SECONDS, then returns; at the end
the worker's stats are printed as JSON. BATCH, LEASE (seconds) and
CONCURRENCY are the QueueWorker's (default 1, 300 and 1). Signals are the
worker's own handling (handle_signals=True)."""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import psycopg

import pg_distlock


def main() -> int:
    dsn, kind, app, seconds = sys.argv[1:5]
    batch, lease = (int(sys.argv[5]), float(sys.argv[6])) if len(sys.argv) > 6 else (1, 300.0)
    concurrency = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    local = threading.local()

    def handler(item: Any) -> None:
        print(f"started {getattr(item, 'id', None) or item.task_id}", flush=True)
        time.sleep(float(seconds))
        if kind == "queue-tx":
            if not hasattr(local, "conn"):
                local.conn = psycopg.connect(dsn, autocommit=True)
            with local.conn.transaction():
                local.conn.execute("INSERT INTO public.effects (job_id) VALUES (%s)", (item.id,))
                pg_distlock.complete_in_transaction(local.conn, item)

    conninfo = f"{dsn} application_name={app}"
    if kind.startswith("queue"):
        worker: Any = pg_distlock.QueueWorker(
            conninfo, handler, wait=20, batch=batch, lease=lease, concurrency=concurrency)
    else:
        worker = pg_distlock.TaskWorker(conninfo, handler, poll_interval=20)
    stats = worker.run()
    print(json.dumps(stats.__dict__), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
