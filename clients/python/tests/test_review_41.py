"""Review 41: Job.queue and Features.job_queue (6b5d1ae, since replaced by reading
the queue from the claimed row). Features were
detected once per connection and never again, so a connection that outlives
a change of the server's SQL keeps the answer it got first. Each test fails
on 6b5d1ae."""

from __future__ import annotations

from typing import Iterator

import psycopg
import pytest

import pg_distlock
from conftest import POOLER, Db, connect, drop_database, dsn, new_database


@pytest.fixture
def db_0_3_0() -> Iterator[Db]:
    db = new_database(version="0.3.0")
    yield db
    drop_database(db)


def test_a_connection_detected_before_the_update_learns_each_jobs_queue_after_it(db_0_3_0: Db) -> None:
    """A consumer of two queues whose connection was detected at 0.3.0's SQL:
    after ALTER EXTENSION pg_distlock UPDATE the server returns each job's
    queue, yet Job.queue stays None until the connection is replaced (a
    pool's connections live for an hour by default)."""
    db = db_0_3_0
    consumer = pg_distlock.Queue(db.dsn, worker_id="c1", queues=["email", "thumbs"])
    assert consumer.consume() == []  # detected here, at 0.3.0
    db.admin.execute("ALTER EXTENSION pg_distlock UPDATE")
    producer = pg_distlock.Queue(db.dsn)
    email = producer.enqueue("mail", queue="email")
    [job] = consumer.consume()
    assert (job.id, job.queue) == (email, "email"), "the server at 0.4.0 says the job's queue"


def test_a_consumer_behind_pgbouncer_keeps_consuming_when_the_server_has_0_3_0s_sql() -> None:
    """Behind PgBouncer the client's connection outlives the server sessions
    behind it: a failover (or a restore) to a server whose pg_distlock SQL is
    still 0.3.0's. The features detected at 0.4.0 stay, so every consume()
    asks for a `queue` column the server does not have (42703), for as long
    as the connection lives; nothing re-detects."""
    db = new_database()
    try:
        consumer = pg_distlock.Queue(dsn(POOLER, db.name), worker_id="c1", queues=["email", "thumbs"])
        assert consumer.consume() == []  # detected at 0.4.0
        with connect(dsn(dbname="postgres")) as admin:
            admin.execute(f"DROP DATABASE {db.name} WITH (FORCE)")
            admin.execute(f"CREATE DATABASE {db.name}")
        with connect(dsn(dbname=db.name)) as other:
            other.execute("CREATE EXTENSION pg_distlock VERSION '0.3.0'")
            other.execute("SELECT distlock.enqueue_task('mail', '{}', p_queue => 'email')")
        try:
            jobs = consumer.consume()
        except pg_distlock.DistlockError as exc:
            pytest.fail(f"consume() against 0.3.0's SQL: {exc!r}")
        assert [job.queue for job in jobs] == [None]
    finally:
        drop_database(db)
