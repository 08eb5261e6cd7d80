"""`status --check`: what in a status needs a person."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from .durations import duration


def problems(status: dict[str, Any], sweep_minutes: float, max_dead: int) -> list[str]:
    found: list[str] = []
    claims = status.get("claims")
    if claims is None:
        found.append("cannot read distlock.running_tasks (grant the monitor capability or pg_monitor)")
    elif claims["past_timeout"]:
        found.append(f"{claims['past_timeout']} claim(s) running past their timeout (the sweep ends them)")
    sweep = status.get("sweep")
    if sweep is None:
        found.append("cannot read distlock.sweep_status")
    elif not sweep or sweep["last_run_at"] is None:
        found.append("the recovery sweep has never run in this database (schedule it with pg_cron)")
    elif sweep["since_last_run"] > timedelta(minutes=sweep_minutes):
        found.append(f"the recovery sweep last ran {duration(sweep['since_last_run'])} ago (more than {sweep_minutes:g} minutes)")
    queues = status.get("queues")
    if queues is None:
        found.append("cannot read distlock.queues")
    elif queues["dead"] > max_dead:
        found.append(f"{queues['dead']} dead job(s) (more than {max_dead}): retry-dead or delete-dead")
    return found
