"""Times the console's overview page (GET /, every statement it makes,
through uvicorn and the pool) and, in the same run, the statements a
dashboard on the older views would read for the same numbers.
  python console_overview.py DSN REQUESTS"""

from __future__ import annotations

import socket
import statistics
import sys
import threading
import time
from typing import Callable

import httpx
import psycopg
import uvicorn

from pg_distlock.console import create_app


def timed(call: Callable[[], object], times: int) -> list[float]:
    for _ in range(3):
        call()
    spent = []
    for _ in range(times):
        start = time.perf_counter()
        call()
        spent.append((time.perf_counter() - start) * 1000)
    return spent


def row(what: str, spent: list[float]) -> str:
    spent = sorted(spent)
    p95 = spent[int(len(spent) * 0.95) - 1]
    return f"{what:<58} p50 {statistics.median(spent):8.1f} ms   p95 {p95:8.1f} ms"


def main() -> None:
    dsn, requests = sys.argv[1], int(sys.argv[2])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(create_app(dsn), log_level="warning", lifespan="on"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    with httpx.Client(timeout=60) as client:
        page = client.get(url)
        assert page.status_code == 200 and "task-1" in page.text, page.text[:500]
        overview = timed(lambda: client.get(url).raise_for_status(), requests)
        part = timed(lambda: client.get(url, params={"part": "main"}).raise_for_status(), requests)
    with psycopg.connect(dsn, autocommit=True) as conn:
        def older() -> None:
            conn.execute("SELECT * FROM distlock.task_stats ORDER BY next_run_at LIMIT 20").fetchall()
            conn.execute("SELECT queue, status, count(*) FROM distlock.jobs GROUP BY 1, 2").fetchall()
        baseline = timed(older, max(requests // 5, 5))
    print(row("console overview, GET / (whole page)", overview))
    print(row("console overview, GET /?part=main (the 5 s refresh)", part))
    print(row("baseline: task_stats top 20 + jobs by queue and status", baseline))
    print(f"baseline / refresh (p50): {statistics.median(baseline) / statistics.median(part):.1f}x")
    server.should_exit = True


if __name__ == "__main__":
    main()
