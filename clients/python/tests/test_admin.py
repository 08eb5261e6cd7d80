"""pg_distlock.Admin (and client.admin()): the admin functions from Python
(issue 47, item 6), each checked against what the server then holds."""

from __future__ import annotations

import pytest

import pg_distlock
from pg_distlock import aio
from conftest import Db, eventually


def status_of(db: Db, job: int) -> object:
    return db.value("SELECT status FROM distlock.jobs WHERE id = %s", job)


def dead_jobs(db: Db, queue: str, count: int) -> list[int]:
    """`count` jobs of `queue` whose only attempt failed (the database holds no other)."""
    with pg_distlock.Queue(db.dsn) as jobs:
        ids = [jobs.enqueue("send", {}, queue=queue, max_attempts=1) for _ in range(count)]
        claimed = jobs.consume(batch=count)
        assert sorted(job.id for job in claimed) == sorted(ids)
        for job in claimed:
            assert jobs.fail(job, "smtp down")
    assert all(status_of(db, job) == "dead" for job in ids)
    return ids


def test_an_admin_pauses_limits_and_resumes_a_queue(db: Db) -> None:
    with pg_distlock.Client(db.dsn) as client:
        admin = client.admin()
        assert admin.pause_queue("mail") is True
        assert admin.pause_queue("mail") is False
        assert db.value("SELECT paused FROM distlock.queue_settings WHERE queue = 'mail'") is True
        admin.set_queue_limit("mail", 2)
        assert db.value("SELECT max_processing FROM distlock.queue_settings WHERE queue = 'mail'") == 2
        assert admin.resume_queue("mail") is True
        assert admin.resume_queue("mail") is False
        admin.set_queue_limit("mail", None)
        assert db.value("SELECT max_processing FROM distlock.queue_settings WHERE queue = 'mail'") is None
        with pytest.raises(pg_distlock.InvalidArgument):
            admin.set_queue_limit("mail", 0)


def test_an_admin_retries_deletes_and_takes_back_jobs(db: Db) -> None:
    admin = pg_distlock.Admin(db.dsn)
    first, second, third = dead_jobs(db, "mail", 3)
    assert admin.retry_dead(ids=[first]) == 1
    assert status_of(db, first) == "pending"
    assert admin.delete_dead(queue="mail", ids=[second]) == 1
    assert status_of(db, second) is None
    assert admin.retry_dead(queue="other") == 0
    assert admin.retry_dead() == 1 and status_of(db, third) == "pending"
    (job,) = [j for j in pg_distlock.Queue(db.dsn).consume(batch=2) if j.id == first] or [None]
    assert job is not None
    assert admin.requeue(ids=[first]) == 1
    assert status_of(db, first) == "pending"
    with pytest.raises(pg_distlock.InvalidArgument):
        admin.retry_dead(ids=["1"])  # type: ignore[list-item]
    admin.close()


def test_an_admin_force_releases_a_lease(db: Db) -> None:
    with pg_distlock.Lease(db.dsn, "nightly", "holder", ttl=30) as lease:
        assert pg_distlock.Admin(db.dsn).release_lease("nightly") is True
        eventually(lambda: lease.lost.is_set(), what="the holder to learn its lease is gone")
    assert pg_distlock.Admin(db.dsn).release_lease("nightly") is False


def test_a_role_without_the_admin_capability_is_refused(db: Db, monitor_role: str) -> None:
    admin = pg_distlock.Admin(f"{db.dsn} user={monitor_role}")
    for call in (lambda: admin.pause_queue("mail"), lambda: admin.retry_dead(), lambda: admin.release_lease("x")):
        with pytest.raises(pg_distlock.PermissionDenied):
            call()
    assert db.value("SELECT count(*) FROM distlock.queue_settings WHERE paused") == 0


async def test_the_asyncio_admin(db: Db) -> None:
    (job,) = dead_jobs(db, "mail", 1)
    async with aio.Client(db.dsn) as client:
        admin = client.admin()
        assert await admin.pause_queue("mail") is True
        assert await admin.retry_dead(queue="mail") == 1
        assert await admin.resume_queue("mail") is True
    assert status_of(db, job) == "pending"


def test_an_admin_runs_a_task_now_without_changing_its_schedule(db: Db) -> None:
    task = db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)"
                    " VALUES ('nightly', 'report', '0 3 * * *', distlock.cron_next('0 3 * * *', now())) RETURNING id")
    assert isinstance(task, int)
    admin = pg_distlock.Admin(db.dsn)
    assert admin.run_task_now(task) is True
    assert db.value("SELECT next_run_at <= now() AND schedule_cron = '0 3 * * *'"
                    " FROM distlock.scheduled_tasks WHERE id = %s", task) is True
    assert admin.run_task_now(task) is False, "due already"
    with pytest.raises(pg_distlock.NotFound):
        admin.run_task_now(2147483647)
    with pytest.raises(pg_distlock.InvalidArgument):
        admin.run_task_now("1")  # type: ignore[arg-type]


def test_an_admin_defines_a_task_in_a_zone_with_a_missed_run_policy_and_redefines_it(db: Db) -> None:
    admin = pg_distlock.Admin(db.dsn)
    task = admin.define_task("berlin-report", "report", "0 3 * * *", timezone="Europe/Berlin",
                             missed_runs="skip", missed_runs_grace=600)
    (row,) = db.rows("SELECT task_type, schedule_timezone, missed_runs, missed_runs_grace, missed_runs_max, is_enabled,"
                 " to_char(timezone('Europe/Berlin', next_run_at), 'HH24:MI')"
                 " FROM distlock.scheduled_tasks WHERE id = %s", task)
    assert row[:2] == ("report", "Europe/Berlin") and row[2] == "skip" and row[3].total_seconds() == 600
    assert row[4:] == (None, True, "03:00"), "the first slot at 03:00 on Berlin's wall clock"
    # The same name redefines the task: its id stays, the slot follows the new schedule.
    again = admin.define_task("berlin-report", "report", "every 10 minutes", missed_runs="all", missed_runs_max=6,
                              enabled=False)
    assert again == task
    (row,) = db.rows("SELECT schedule_cron, schedule_timezone, missed_runs, missed_runs_grace, missed_runs_max, is_enabled"
                 " FROM distlock.scheduled_tasks WHERE id = %s", task)
    assert row == ("every 10 minutes", None, "all", None, 6, False)
    assert db.value("SELECT count(*) FROM distlock.scheduled_tasks") == 1
    # Defined again without `enabled` (an application at its start): the operator's disable stays.
    admin.define_task("berlin-report", "report", "every 10 minutes", missed_runs="all", missed_runs_max=6)
    assert db.value("SELECT is_enabled FROM distlock.scheduled_tasks WHERE id = %s", task) is False
    for bad in (dict(timezone="Mars/Olympus_Mons"), dict(missed_runs="skip"), dict(missed_runs_max=0),
                dict(missed_runs="sometimes")):
        with pytest.raises(pg_distlock.InvalidArgument):
            admin.define_task("bad", "report", "@hourly", **bad)  # type: ignore[arg-type]
    with pytest.raises(pg_distlock.InvalidArgument):
        admin.define_task("bad", "report", "61 * * * *")
    with pytest.raises(pg_distlock.InvalidArgument):
        admin.define_task("bad", 7)  # type: ignore[arg-type]
    assert db.value("SELECT count(*) FROM distlock.scheduled_tasks") == 1


def test_a_monitor_role_may_not_define_tasks(db: Db, monitor_role: str) -> None:
    with pytest.raises(pg_distlock.PermissionDenied):
        pg_distlock.Admin(f"{db.dsn} user={monitor_role}").define_task("x", "report", "@hourly")


async def test_the_asyncio_admin_defines_a_task(db: Db) -> None:
    async with aio.Client(db.dsn) as client:
        task = await client.admin().define_task("tick", "ping", "every 5 seconds")
    assert db.value("SELECT schedule_cron FROM distlock.scheduled_tasks WHERE id = %s", task) == "every 5 seconds"
