"""Review of jq2 (02cffcc): Job.queue read as `to_jsonb(claimed) ->> 'queue'`
from the claimed row by a consumer of several queues (or of every queue).
Each test fails on 02cffcc."""

from __future__ import annotations

import threading

import pytest

import pg_distlock
from conftest import Db, eventually


def test_a_consumer_of_several_queues_waiting_in_the_server_holds_back_no_vacuum_horizon(db: Db) -> None:
    """The server lets a waiting consumer sleep without an xmin only when its
    statement computes nothing but immutable expressions over one call of a
    claim function (src/queue/horizon.rs). to_jsonb is STABLE, so the
    consume statement of a consumer of several queues (and QueueWorker's of
    every queue, test_queue_worker.py's horizon test) keeps its snapshot's
    xmin for the whole wait: vacuum keeps every row version that dies while
    a fleet waits, which 0.3.0's client (plain columns) never did. A
    consumer of one queue (NULL::text) still sleeps without one."""
    consumer = pg_distlock.Queue(db.dsn, worker_id="c1", queues=["email", "thumbs"])
    got: list[object] = []
    waiter = threading.Thread(target=lambda: got.append(consumer.consume(wait=15)))
    waiter.start()
    try:
        asleep = ("SELECT backend_xmin::text FROM pg_stat_activity"
                  " WHERE datname = current_database() AND wait_event_type = 'Extension'")
        eventually(lambda: db.rows(asleep), timeout=10, what="the consumer asleep in the server")
        held = db.rows(asleep)
    finally:
        pg_distlock.Queue(db.dsn).enqueue("wake", queue="email")
        waiter.join(20)
    assert held == [(None,)], f"the waiting consumer of two queues holds back the xmin horizon: {held}"


def test_a_job_with_a_payload_near_jsonbs_limit_reaches_a_consumer_of_several_queues(db: Db) -> None:
    """A payload jsonb can hold (268435455 bytes of elements, less a few
    hundred) is enqueued and claimed by any consumer, and handed to a
    consumer of one queue, but to_jsonb(claimed) wraps it in the claimed
    row's object, which exceeds jsonb's limit: the consume statement fails
    (54000 `total size of jsonb object elements exceeds the maximum`) and
    rolls its claim back, so the job stays at the head of its queue and
    every consumer of several queues or of every queue fails on it each
    time, the jobs behind it never handed out; its attempts never count."""
    big = db.value(
        "SELECT distlock.enqueue_task('big', jsonb_build_object('a', repeat('x', 268435400)), p_queue => 'bulk')")
    consumer = pg_distlock.Queue(db.dsn, worker_id="c1", queues=["bulk", "other"])
    try:
        jobs = consumer.consume()
    except Exception as exc:  # noqa: BLE001 - the failure is the finding
        pytest.fail(f"consume() of two queues fails on a {268435400}-byte payload: {type(exc).__name__}: {exc}")
    assert [job.id for job in jobs] == [big]
