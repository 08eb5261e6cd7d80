"""The Python client's QueueWorker against a hand-written psycopg loop of
consume_task + complete_task, one process each, the same concurrency, a
no-op handler; QueueWorker with its defaults (claiming for free handlers
only) and with a prefetch of its concurrency. Run by benches/queue_python.sh; prints jobs/s as CSV rows:
the median of each over the rounds, and the lowest and highest ratio of a round."""

from __future__ import annotations

import statistics
import sys
import threading
import time

import psycopg

import pg_distlock


def fill(dsn: str, jobs: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("TRUNCATE distlock.task_queue, distlock.completed_jobs")
        conn.execute(
            "INSERT INTO distlock.task_queue (task_name, payload)"
            " SELECT 'bench', pg_catalog.jsonb_build_object('n', g) FROM pg_catalog.generate_series(1, %s) g",
            (jobs,),
        )
        conn.execute("VACUUM ANALYZE distlock.task_queue")


def completed(dsn: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM distlock.completed_jobs").fetchone()
        return int(row[0]) if row else 0


def hand_written(dsn: str, concurrency: int, seconds: float) -> float:
    """What a user writes without the client: a thread per slot, each with
    its own connection, claiming one job and completing it."""
    stop = threading.Event()

    def loop(n: int) -> None:
        worker = f"hand-{n}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            while not stop.is_set():
                row = conn.execute(
                    "SELECT task_id, attempts FROM distlock.consume_task(p_worker_id => %s, p_lease => '5 minutes')",
                    (worker,),
                ).fetchone()
                if row is None or row[0] is None:
                    return
                conn.execute("SELECT distlock.complete_task(%s, %s, %s)", (row[0], worker, row[1]))

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(concurrency)]
    return timed(dsn, seconds, threads, stop.set)


def queue_worker(dsn: str, concurrency: int, prefetch: int, seconds: float) -> float:
    worker = pg_distlock.QueueWorker(
        dsn, lambda job: None, concurrency=concurrency, prefetch=prefetch, handle_signals=False
    )
    return timed(dsn, seconds, [threading.Thread(target=worker.run)], worker.stop)


def timed(dsn: str, seconds: float, threads: list[threading.Thread], stop: object) -> float:
    before = completed(dsn)
    began = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    after = completed(dsn)
    elapsed = time.monotonic() - began
    stop()  # type: ignore[operator]
    for thread in threads:
        thread.join()
    return (after - before) / elapsed


def main() -> int:
    dsn, seconds = sys.argv[1], float(sys.argv[2])
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 1
    jobs = int(seconds * 25000)
    # Rounds alternate the loops, and each figure is the median of its
    # rounds: one 8-second round of either moved by a third between runs.
    baselines: dict[int, list[float]] = {}
    ours: dict[tuple[int, int], list[float]] = {}
    for _ in range(rounds):
        for concurrency, prefetch in ((1, 0), (16, 0), (16, 16)):
            if prefetch == 0:
                fill(dsn, jobs)
                baselines.setdefault(concurrency, []).append(hand_written(dsn, concurrency, seconds))
            fill(dsn, jobs)
            ours.setdefault((concurrency, prefetch), []).append(queue_worker(dsn, concurrency, prefetch, seconds))
    for (concurrency, prefetch), rates in ours.items():
        print(
            f"{concurrency},{prefetch},{statistics.median(baselines[concurrency]):.0f},{statistics.median(rates):.0f},"
            f"{min(r / b for r, b in zip(rates, baselines[concurrency])):.2f},"
            f"{max(r / b for r, b in zip(rates, baselines[concurrency])):.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
