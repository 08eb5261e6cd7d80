"""How values read from the views are written on the page (the templates
escape the result)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any, Callable


def duration(value: Any) -> str:
    if value is None:
        return ""
    if not isinstance(value, timedelta):
        return str(value)
    seconds = value.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, second = divmod(int(seconds), 60)
    hours, minute = divmod(minutes, 60)
    days, hour = divmod(hours, 24)
    if days:
        return f"{days}d {hour}h {minute:02d}m"
    if hours:
        return f"{hour}h {minute:02d}m {second:02d}s"
    return f"{minute}m {second:02d}s"


def moment(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.isoformat(sep=" ", timespec="seconds")
    return str(value)


def pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def number(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.1f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


FILTERS: dict[str, Callable[[Any], str]] = {
    "duration": duration,
    "moment": moment,
    "pretty_json": pretty_json,
    "number": number,
}
