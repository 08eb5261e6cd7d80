"""How values read from the views are written on the page (the templates
escape the result)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Callable

from ..inspect.durations import duration


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
