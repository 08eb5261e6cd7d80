"""Durations as people read them ("2h 05m 10s", "340 ms"), the same in the
command and the console."""

from __future__ import annotations

from datetime import timedelta
from typing import Any


def duration(value: Any) -> str:
    """`value` (a timedelta; anything else as str) in its two or three
    largest units; negative ones (a lease past its expiry) with a minus."""
    if value is None:
        return ""
    if not isinstance(value, timedelta):
        return str(value)
    seconds = value.total_seconds()
    if seconds < 0:
        return "-" + duration(-value)
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
