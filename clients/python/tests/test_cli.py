"""The `pg-distlock` command against a database with real holders, waiters,
queues and dead jobs."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from typing import Any

import pytest

from conftest import Db, connect, eventually, lease_worker, lock_wait_chain
from pg_distlock.cli import main


def cli(db: Db, *argv: str, answer: str = "", dsn: str | None = None) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["--dsn", dsn or db.dsn, *argv], stdin=io.StringIO(answer), stdout=out)
    return code, out.getvalue()


def cli_json(db: Db, *argv: str, dsn: str | None = None) -> Any:
    code, out = cli(db, "--json", *argv, dsn=dsn)
    assert code == 0, out
    return json.loads(out)


def dead_job(db: Db, queue: str = "mail") -> int:
    job = db.value("SELECT distlock.enqueue_task('send', '{}', now(), 0, 1, %s)", queue)
    claimed = db.value("SELECT task_id FROM distlock.consume_task('w', p_queues => ARRAY[%s])", queue)
    assert claimed == job
    assert db.value("SELECT distlock.fail_task(%s, 'smtp down', 'w')", job) is True
    return int(job)  # type: ignore[arg-type]


def test_status_check_fails_until_the_sweep_runs_and_while_a_job_is_dead(db: Db) -> None:
    code, out = cli(db, "status", "--check")
    assert code == 1 and "never run" in out
    code, out = cli(db, "sweep", "--yes")
    assert code == 0, out
    code, out = cli(db, "status", "--check")
    assert code == 0, out
    job = dead_job(db)
    code, out = cli(db, "status", "--check")
    assert code == 1 and "1 dead job" in out
    assert cli(db, "status", "--check", "--max-dead", "1")[0] == 0
    status = cli_json(db, "status")
    assert status["queues"]["dead"] == 1 and status["sweep"]["runs"] == 1
    assert status["server"]["extension_version"] == db.value("SELECT extversion FROM pg_extension WHERE extname = 'pg_distlock'")
    assert cli_json(db, "queue")["dead_jobs"][0]["id"] == job


def test_status_check_fails_when_the_sweep_is_late(db: Db) -> None:
    assert cli(db, "sweep", "--yes")[0] == 0
    db.admin.execute("UPDATE distlock.sweep_state SET last_run_at = now() - interval '10 minutes'")
    code, out = cli(db, "status", "--check")
    assert code == 1 and re.search(r"last ran 10m 0\ds ago", out), out
    code, out = cli(db, "status")
    assert re.search(r"sweep +last ran 10m 0\ds ago", out), out
    assert cli(db, "status", "--check", "--sweep-minutes", "15")[0] == 0


def test_status_check_fails_for_a_claim_past_its_timeout(db: Db) -> None:
    db.admin.execute(
        "INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at, timeout)"
        " VALUES ('slow', 'etl', '@daily', now(), '1 second')"
    )
    assert cli(db, "sweep", "--yes")[0] == 0
    with connect(db.dsn) as worker:
        worker.execute("SELECT * FROM distlock.worker_fetch_and_execute_task('w1')")
        eventually(lambda: cli(db, "status", "--check")[0] == 1, what="the claim to pass its timeout")
        code, out = cli(db, "status", "--check")
        assert "1 claim(s) running past their timeout" in out
        task = cli_json(db, "tasks")["tasks"][0]
        assert (task["task_name"], task["running_worker"], task["past_timeout"]) == ("slow", "w1", True)
        assert task["fencing_token"] is not None


def test_a_killed_lease_workers_claim_shows_its_connection_gone_then_its_lease_expired(db: Db) -> None:
    (task,) = db.add_tasks(1, "nightly")
    # A worker process holding a lease-mode claim, killed with kill -9. The
    # lease is long enough for the two readings before it runs out.
    worker = lease_worker(db.dsn, task, "6 seconds")
    assert cli_json(db, "tasks")["tasks"][0]["holder"] == "alive"
    worker.kill()
    worker.wait()
    eventually(lambda: cli_json(db, "tasks")["tasks"][0]["holder"] == "lease live, connection gone",
               what="the killed worker's claim to show its connection gone")
    assert "1 with their holder gone" in cli(db, "status")[1]
    eventually(lambda: cli_json(db, "tasks")["tasks"][0]["holder"] == "lease expired", timeout=20, what="the lease to run out")


def test_retry_dead_asks_first_and_makes_the_job_runnable(db: Db) -> None:
    job = dead_job(db, "mail")
    other = dead_job(db, "thumbs")
    code, out = cli(db, "retry-dead", "--queue", "mail", answer="n\n")
    assert code == 1 and "Retry 1 dead job(s) of queue 'mail'?" in out and "cancelled" in out
    assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", job) == "dead"
    code, out = cli(db, "retry-dead", "--queue", "mail", answer="y\n")
    assert code == 0 and "retry-dead: 1" in out
    assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", job) == "pending"
    assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", other) == "dead"
    code, out = cli(db, "delete-dead", str(other), "--yes")
    assert code == 0
    assert db.value("SELECT count(*) FROM distlock.task_queue WHERE id = %s", other) == 0


def test_requeue_asks_first_and_takes_a_processing_job_back(db: Db) -> None:
    job = db.value("SELECT distlock.enqueue_task('send', '{}', now(), 0, 3, 'mail')")
    assert db.value("SELECT task_id FROM distlock.consume_task('w', '1 hour', p_queues => ARRAY['mail'])") == job
    code, out = cli(db, "requeue", str(job), answer="n\n")
    assert code == 1 and f"Return 1 processing job(s) among ids {job} to the queue?" in out
    assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", job) == "processing"
    code, out = cli(db, "requeue", str(job), answer="y\n")
    assert code == 0 and "requeue: 1" in out
    assert db.value("SELECT status FROM distlock.task_queue WHERE id = %s", job) == "pending"
    assert db.value("SELECT distlock.complete_task(%s, 'w')", job) is False


def test_pause_resume_and_force_release(db: Db) -> None:
    db.admin.execute("SELECT distlock.enqueue_task('send', p_queue => 'mail')")
    assert cli(db, "pause", "mail", "--yes")[0] == 0
    assert cli_json(db, "queue")["queues"][0]["paused"] is True
    assert cli(db, "resume", "mail", "--yes")[0] == 0
    assert cli_json(db, "queue")["queues"][0]["paused"] is False
    token = db.value("SELECT distlock.acquire_lease('primary', 'node-a', '1 hour')")
    lease = cli_json(db, "leases")["leases"][0]
    assert (lease["name"], lease["owner"], lease["token"], lease["is_held"]) == ("primary", "node-a", token, True)
    code, out = cli(db, "release-lease", "primary", answer="y\n")
    assert code == 0 and "Force-release lease 'primary'?" in out
    assert cli_json(db, "leases")["leases"] == [], "a force-released lease is gone"
    assert db.value("SELECT distlock.check_lease_token('primary', %s)", token) is False
    db.admin.execute("SELECT * FROM distlock.try_become_leader('scheduler', 'node-b', '1 hour')")
    leader = cli_json(db, "leaders")["leaders"][0]
    assert (leader["group_name"], leader["leader"], leader["is_current"]) == ("scheduler", "node-b", True)


def test_locks_shows_the_wait_chain_and_its_holder(db: Db) -> None:
    with lock_wait_chain(db, "orders:42"):
        eventually(lambda: len(cli_json(db, "locks")["waits"]) >= 2, what="two waiters")
        report = cli_json(db, "locks")
        held = [l for l in report["locks"] if l["granted"]]
        assert [(l["application"], l["lock"]) for l in held] == [("holder", "orders:42")]
        assert {w["blocked_application"] for w in report["waits"]} >= {"waiter0", "waiter1"}
        assert report["deadlocks"] == []
        code, out = cli(db, "locks")
        assert code == 0
        lines = out.splitlines()
        root = next(i for i, line in enumerate(lines) if line.endswith("(holder) holds"))
        assert any("(waiter0) waits" in line and "orders:42" in line for line in lines[root + 1:])


def test_a_monitor_reads_but_may_not_act(db: Db, monitor_role: str, capsys: pytest.CaptureFixture[str]) -> None:
    dead_job(db)
    dsn = f"{db.dsn} user={monitor_role}"
    status = cli_json(db, "status", dsn=dsn)
    assert status["queues"]["dead"] == 1 and status["server"]["storage"].startswith("unknown")
    assert cli_json(db, "queue", dsn=dsn)["dead_jobs"] is None, "dead jobs' payloads are for admins"
    code, _ = cli(db, "retry-dead", "--yes", dsn=dsn)
    err = capsys.readouterr().err
    assert code == 3 and "permission denied" in err
    # The error says what to grant, not just what was refused (issue 47).
    assert f"retry-dead needs the admin capability" in err, err
    assert f"SELECT distlock.grant_capability('{monitor_role}', 'admin');" in err, err
    code, _ = cli(db, "pause", "mail", "--yes", dsn=dsn)
    assert code == 3 and "pause needs the admin capability" in capsys.readouterr().err
    assert db.value("SELECT count(*) FROM distlock.task_queue WHERE status = 'dead'") == 1
    assert db.value("SELECT count(*) FROM distlock.queue_settings WHERE paused") == 0


def test_global_options_are_accepted_after_the_command(db: Db) -> None:
    """`pg-distlock status --json --dsn ...`, as people type it, works as
    `pg-distlock --json --dsn ... status` does (it was refused)."""
    dead_job(db)
    out = io.StringIO()
    assert main(["status", "--json", "--dsn", db.dsn], stdin=io.StringIO(), stdout=out) == 0
    assert json.loads(out.getvalue())["queues"]["dead"] == 1
    out = io.StringIO()
    # One given before the command is kept when none is given after it.
    assert main(["--dsn", db.dsn, "queue", "--json"], stdin=io.StringIO(), stdout=out) == 0
    assert json.loads(out.getvalue())["dead_jobs"][0]["queue"] == "mail"
    # After the command it wins, as the last option given does.
    assert main(["--dsn", "host=/nonexistent", "status", "--dsn", db.dsn], stdin=io.StringIO(),
                stdout=io.StringIO()) == 0


def test_a_reader_that_goes_away_ends_the_command_quietly(db: Db) -> None:
    """`pg-distlock tasks | head -1`: the output (here about 200 kB, more
    than a pipe holds) meets a closed pipe; the command ends with 141, as
    one killed by SIGPIPE does, and writes no traceback."""
    db.add_tasks(3000, "a-task-with-a-rather-long-name-to-fill-the-pipe")
    command = subprocess.Popen([sys.executable, "-m", "pg_distlock", "--dsn", db.dsn, "tasks"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert command.stdout is not None and command.stderr is not None
    assert command.stdout.readline() == "tasks\n"
    command.stdout.close()
    assert command.wait(timeout=60) == 141
    assert command.stderr.read() == ""


def test_tasks_show_the_next_run_on_the_wall_clock_of_the_tasks_zone(db: Db) -> None:
    db.admin.execute("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, schedule_timezone)"
                     " VALUES ('kolkata', 'etl', '30 9 * * *', 'Asia/Kolkata'), ('plain', 'etl', '30 9 * * *', NULL)")
    tasks = {task["task_name"]: task for task in cli_json(db, "tasks")["tasks"]}
    assert tasks["kolkata"]["timezone"] == "Asia/Kolkata" and tasks["plain"]["timezone"] == "UTC"
    assert tasks["kolkata"]["next_run_local"].endswith("T09:30:00"), tasks["kolkata"]
    assert tasks["plain"]["next_run_local"].endswith("T09:30:00"), tasks["plain"]
    code, out = cli(db, "tasks")
    assert code == 0 and "Asia/Kolkata" in out, out


def test_run_now_makes_a_task_due_after_asking(db: Db) -> None:
    task = db.value("INSERT INTO distlock.scheduled_tasks (task_name, task_type, schedule_cron, next_run_at)"
                    " VALUES ('report', 'etl', '0 3 * * *', distlock.cron_next('0 3 * * *', now())) RETURNING id")
    code, out = cli(db, "run-now", str(task), answer="n\n")
    assert code == 1 and f"Run task {task} now?" in out, out
    code, out = cli(db, "run-now", str(task), "--yes")
    assert code == 0 and "run-now: yes" in out, out
    assert db.value("SELECT next_run_at <= now() FROM distlock.scheduled_tasks WHERE id = %s", task) is True


def test_disable_and_enable_a_task_after_asking(db: Db, capsys: pytest.CaptureFixture[str]) -> None:
    task = db.add_tasks(1, "report")[0]
    code, out = cli(db, "disable-task", str(task), answer="n\n")
    assert code == 1 and f"Disable task {task} 'report-1'? Workers stop claiming it" in out, out
    assert db.value("SELECT is_enabled FROM distlock.scheduled_tasks WHERE id = %s", task) is True
    code, out = cli(db, "disable-task", str(task), answer="y\n")
    assert code == 0 and "disable-task: yes" in out, out
    assert db.value("SELECT is_enabled FROM distlock.scheduled_tasks WHERE id = %s", task) is False
    assert "disable-task: no" in cli(db, "disable-task", str(task), "--yes")[1], "nothing to do"
    code, out = cli(db, "enable-task", str(task), "--yes")
    assert code == 0 and "enable-task: yes" in out, out
    assert db.value("SELECT is_enabled FROM distlock.scheduled_tasks WHERE id = %s", task) is True
    assert cli(db, "enable-task", str(task + 1), "--yes")[0] == 3
    assert f"no task {task + 1}" in capsys.readouterr().err
    # A transaction left open on the task's row refuses the change at once rather than hanging it.
    with connect(db.dsn) as holder, holder.transaction():
        holder.execute("SELECT 1 FROM distlock.scheduled_tasks WHERE id = %s FOR UPDATE", (task,))
        assert cli(db, "disable-task", str(task), "--yes")[0] == 3
        assert "could not obtain lock" in capsys.readouterr().err
    assert db.value("SELECT is_enabled FROM distlock.scheduled_tasks WHERE id = %s", task) is True


def test_limit_sets_and_removes_a_queues_concurrency_limit(db: Db) -> None:
    code, out = cli(db, "limit", "mail", "3", answer="y\n")
    assert code == 0 and "Limit queue 'mail' to 3 job(s) processing at once?" in out, out
    assert db.value("SELECT max_processing FROM distlock.queue_settings WHERE queue = 'mail'") == 3
    code, out = cli(db, "limit", "mail", "none", "--yes")
    assert code == 0 and "limit: done" in out, out
    assert db.value("SELECT max_processing FROM distlock.queue_settings WHERE queue = 'mail'") is None
    with pytest.raises(SystemExit) as refused:
        cli(db, "limit", "mail", "0", "--yes")
    assert refused.value.code == 2


def test_python_m_runs_the_command_and_reports_a_missing_extension(db: Db) -> None:
    run = subprocess.run([sys.executable, "-m", "pg_distlock", "--dsn", db.dsn, "status"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and "storage" in run.stdout, run.stderr
    db.admin.execute("DROP EXTENSION pg_distlock")
    run = subprocess.run([sys.executable, "-m", "pg_distlock", "--dsn", db.dsn, "status"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 3 and "not installed" in run.stderr


def test_the_wait_graph_draws_chains_under_their_holder_and_marks_a_cycle() -> None:
    from pg_distlock.inspect import waitgraph

    def edge(blocked: int, blocking: int) -> dict[str, Any]:
        return {"blocked_pid": blocked, "blocked_application": f"app{blocked}", "blocking_pid": blocking,
                "blocking_application": f"app{blocking}", "locktype": "advisory", "lock": "k", "waiting_for": None}

    chain = [edge(2, 1), edge(3, 2)]
    assert list(waitgraph.draw(chain)) == [
        "pid 1 (app1) holds",
        "└─ pid 2 (app2) waits on advisory k",
        "   └─ pid 3 (app3) waits on advisory k",
    ]
    assert waitgraph.cycles(chain) == []
    loop = [edge(7, 5), edge(5, 6), edge(6, 7), edge(8, 7)]
    assert waitgraph.cycles(loop) == [[5, 6, 7]]
    assert list(waitgraph.draw(loop))[-1] == "DEADLOCK pid 5 -> pid 6 -> pid 7 -> pid 5"


def test_durations_read_as_people_read_them() -> None:
    """The command and the console write durations alike, in their largest
    units (the command wrote "00:10:00.532" in one place, "00:10:00" in
    another)."""
    from datetime import timedelta

    from pg_distlock.inspect.durations import duration

    cases = [(timedelta(milliseconds=340), "340 ms"), (timedelta(seconds=12.34), "12.3 s"),
             (timedelta(minutes=10, seconds=0.5), "10m 00s"), (timedelta(hours=2, minutes=5, seconds=10), "2h 05m 10s"),
             (timedelta(days=3, hours=4, minutes=7), "3d 4h 07m"), (timedelta(seconds=-90), "-1m 30s")]
    assert [duration(value) for value, _ in cases] == [text for _, text in cases]
