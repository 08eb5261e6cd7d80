"""Fourth review of the queue counters (branch metrics-rebased): breaks of
the exporter written as tests that fail on the branch."""

from __future__ import annotations

from typing import Any, Optional

from prometheus_client import CollectorRegistry, generate_latest

from conftest import Db, connect
from pg_distlock import metrics
from test_metrics import parse


def claim_after_waiting(db: Db, queue: str, seconds: int) -> None:
    """One job of `queue` claimed (committed) after it was runnable for `seconds`."""
    job = db.value("SELECT distlock.enqueue_task('send', '{}', p_queue => %s)", queue)
    db.admin.execute("UPDATE distlock.task_queue SET created_at = created_at - make_interval(secs => %s), "
                     "run_after = run_after - make_interval(secs => %s) WHERE id = %s", (seconds, seconds, job))
    assert db.value("SELECT task_id FROM distlock.consume_task('w', '1 hour', NULL, ARRAY[%s])", queue) == job


def test_the_wait_histograms_sum_and_buckets_come_from_one_reading(db: Db) -> None:
    """Break: the exporter builds pg_distlock_queue_wait_seconds from two
    statements, each calling distlock.queue_counters() anew: `_sum` from
    the query queue_counters (with the job counters), the `_bucket`s (and
    `_count`, the +Inf bucket) from queue_wait_buckets. A claim committed
    between the two (any busy queue, at any scrape) is in the buckets and
    `_count` but not in `_sum`; a reset between them zeroes the buckets and
    leaves `_sum`. Here: one job claimed after waiting 10 s is read by the
    first statement; another, after 100 s, commits before the second. The
    scrape says 2 claims, both waited over 10 s (le=10 is 0), in 10 s all
    told: a histogram no set of observations gives. Reading sum, count
    and buckets from one call (one statement) keeps them one reading."""
    claim_after_waiting(db, "racy", 10)
    other = connect(db.dsn)
    pool = metrics.open_pool(db.dsn)
    pool.open()
    try:
        collector = metrics.DatabaseCollector(pool)
        plain = collector._rows

        def rows(conn: Any, definition: metrics.Definition) -> Optional[list[dict[str, Any]]]:
            found = plain(conn, definition)
            if "AS wait_count" in definition.query and "b.le" not in definition.query:
                # A consumer commits its claim right after the first reading.
                job = other.execute("SELECT distlock.enqueue_task('send', '{}', p_queue => 'racy')").fetchone()
                assert job is not None
                other.execute("UPDATE distlock.task_queue SET created_at = created_at - interval '100 seconds', "
                              "run_after = run_after - interval '100 seconds' WHERE id = %s", (job[0],))
                other.execute("SELECT distlock.consume_task('w2', '1 hour', NULL, ARRAY['racy'])")
            return found

        collector._rows = rows  # type: ignore[method-assign]
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        found = parse(generate_latest(registry).decode())
    finally:
        pool.close()
        other.close()
    label = (("queue", "racy"),)
    count = found[("pg_distlock_queue_wait_seconds_count", label)]
    total = found[("pg_distlock_queue_wait_seconds_sum", label)]
    within_10 = found[("pg_distlock_queue_wait_seconds_bucket", (("le", "10.0"), ("queue", "racy")))]
    # Every observation above le=10 adds more than 10 s to the sum.
    assert total >= 10 * (count - within_10), (
        f"one scrape's histogram: _count {count}, none within 10 s ({within_10}), yet _sum {total} s: "
        "_sum and the buckets were read by two statements, a claim committed between them")
