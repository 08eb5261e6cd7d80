"""Aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any, Optional, TextIO

from ..inspect import waitgraph
from ..inspect.durations import duration
from ..inspect.reads import Rows


def _json_value(value: Any) -> Any:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    return str(value)


def _dump(data: Any, out: TextIO) -> None:
    json.dump(data, out, default=_json_value, indent=2)
    out.write("\n")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, timedelta):
        return duration(value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S%z")
    return str(value)


def table(rows: Rows, out: TextIO) -> None:
    if not rows:
        out.write("(none)\n")
        return
    columns = list(rows[0])
    cells = [[_text(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]
    out.write("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip() + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for line in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(line, widths)).rstrip() + "\n")


def tables(sections: dict[str, Optional[Rows]], as_json: bool, out: TextIO) -> None:
    if as_json:
        _dump({name.replace(" ", "_"): rows for name, rows in sections.items()}, out)
        return
    for i, (name, rows) in enumerate(sections.items()):
        if i:
            out.write("\n")
        out.write(f"{name}\n")
        if rows is None:
            out.write("(not readable by this role)\n")
        else:
            table(rows, out)


def status(status: dict[str, Any], problems: list[str], as_json: bool, out: TextIO) -> None:
    if as_json:
        _dump({**status, "problems": problems}, out)
        return
    server = status["server"]
    role = "standby" if server.get("standby") else "primary"
    out.write(f"pg_distlock {server.get('extension_version')} (files {server.get('library_version')}) "
              f"on PostgreSQL {server.get('server_version')}, database {server.get('database')}, {role}\n")
    out.write(f"{'storage':<9} {server['storage']}\n")

    def line(name: str, data: Optional[dict[str, Any]], text: str) -> None:
        out.write(f"{name:<9} {'(not readable by this role)' if data is None else text.format(**data)}\n")

    line("claims", status["claims"], "{running} running, {past_timeout} past their timeout, {holder_gone} with their holder gone")
    line("waits", status["waits"], "{waiting_sessions} sessions waiting for a lock")
    line("queues", status["queues"],
         "{queues} queues ({paused} paused): {pending} pending, {processing} processing, {failed} failed, {dead} dead")
    line("leases", status["leases"], "{held} held of {known}")
    line("leaders", status["leaders"], "{current} current of {groups} groups")
    sweep = status["sweep"]
    if sweep is None:
        line("sweep", None, "")
    elif not sweep or sweep["last_run_at"] is None:
        out.write(f"{'sweep':<9} never ran\n")
    else:
        out.write(f"{'sweep':<9} last ran {_text(sweep['since_last_run'])} ago, recovered {sweep['last_recovered']}, "
                  f"{sweep['runs']} runs\n")
    for problem in problems:
        out.write(f"PROBLEM   {problem}\n")


def locks(locks: Optional[Rows], waits: Optional[Rows], as_json: bool, out: TextIO) -> None:
    if as_json:
        cycles = waitgraph.cycles(waits or [])
        # An owner-less backend in an owner cycle stands for itself: a number
        # (its pid) among the owners' names.
        owner_cycles = [{"owners": list(c.owners), "pids": list(c.pids), "waits": [list(w) for w in c.waits]}
                        for c in waitgraph.owner_cycles(waits or [])]
        _dump({"locks": locks, "waits": waits, "deadlocks": cycles, "owner_deadlocks": owner_cycles}, out)
        return
    tables({"advisory locks": locks}, False, out)
    out.write("\nwait-for graph\n")
    if waits is None:
        out.write("(not readable by this role)\n")
    else:
        for text_line in waitgraph.draw(waits):
            out.write(text_line + "\n")


def action(command: str, done: Any, as_json: bool, out: TextIO) -> None:
    if as_json:
        _dump({"command": command, "result": done}, out)
    elif isinstance(done, dict) and "recovered" in done:
        out.write(f"{command}: {len(done['recovered'])} claim(s) recovered\n")
        if done["recovered"]:
            table(done["recovered"], out)
    else:
        # A function returning void answers an empty text.
        out.write(f"{command}: {'done' if done in (None, '') else _text(done)}\n")
