"""The console's tasks: the admin actions on a task (run now, enable,
disable) behind the confirmation."""

from __future__ import annotations

from conftest import Db
from test_console import console, post, text_of


def enabled(db: Db, task: int) -> object:
    return db.value("SELECT is_enabled FROM distlock.scheduled_tasks WHERE id = %s", task)


def test_disable_enable_and_run_now_ask_first_then_change_the_task(db: Db) -> None:
    task = db.add_tasks(1, "nightly")[0]
    db.admin.execute("UPDATE distlock.scheduled_tasks SET next_run_at = now() + interval '1 day' WHERE id = %s",
                     (task,))
    with console(db.dsn) as (client, token):
        asked = post(client, "disable-task", token=token, task_id=task, back="/")
        assert asked.status_code == 200
        assert text_of(asked.text, "question").startswith(f"Disable task {task} 'nightly-1'? Workers stop claiming it")
        assert enabled(db, task) is True
        done = post(client, "disable-task", token=token, task_id=task, back="/", confirmed="yes")
        assert done.status_code == 303 and done.headers["location"] == "/?done=disable-task&n=1"
        assert enabled(db, task) is False
        assert "disable-task: done" in client.get(done.headers["location"]).text
        again = post(client, "disable-task", token=token, task_id=task, back="/", confirmed="yes")
        assert again.headers["location"] == "/?done=disable-task&n=0", "nothing to do"

        asked = post(client, "enable-task", token=token, task_id=task, back="/")
        assert text_of(asked.text, "question").startswith(f"Enable task {task} 'nightly-1'? Workers claim it from")
        assert post(client, "enable-task", token=token, task_id=task, back="/", confirmed="yes").status_code == 303
        assert enabled(db, task) is True

        asked = post(client, "run-now", token=token, task_id=task, back="/")
        assert text_of(asked.text, "question") == f"Run task {task} now? Its schedule stays as it is."
        done = post(client, "run-now", token=token, task_id=task, back="/", confirmed="yes")
        assert done.headers["location"] == "/?done=run-now&n=1"
        assert db.value("SELECT next_run_at <= now() FROM distlock.scheduled_tasks WHERE id = %s", task) is True

        for garbage in ("abc", "-1", "2147483648", "9" * 5000, "", "1e3"):
            refused = post(client, "disable-task", token=token, task_id=garbage, back="/", confirmed="yes")
            assert refused.status_code == 400, (garbage[:20], refused.status_code)
        unknown = post(client, "disable-task", token=token, task_id=task + 1, back="/", confirmed="yes")
        assert unknown.status_code == 400 and f"no task {task + 1}" in unknown.text
    assert enabled(db, task) is True

