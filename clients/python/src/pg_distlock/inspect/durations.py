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
    # Rounded first, then put in its unit: 59.96 s is "1m 00s", not "60.0 s".
    millis = round(abs(seconds) * 1000)
    sign = "-" if seconds < 0 and millis else ""
    if millis < 1000:
        return f"{sign}{millis} ms"
    tenths = round(abs(seconds) * 10)
    if tenths < 600:
        return f"{sign}{tenths / 10:.1f} s"
    minutes, second = divmod(round(abs(seconds)), 60)
    hours, minute = divmod(minutes, 60)
    days, hour = divmod(hours, 24)
    if days:
        return f"{sign}{days}d {hour}h {minute:02d}m"
    if hours:
        return f"{sign}{hour}h {minute:02d}m {second:02d}s"
    return f"{sign}{minute}m {second:02d}s"
