"""Charts as geometry for the templates to draw as SVG: no script library,
and nothing in them but numbers (names are drawn by the template, escaped)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..inspect.reads import Rows

STATES = ("pending", "processing", "failed", "dead")
MIN_BAR_PX = 4.0


@dataclass
class Rect:
    x: float
    y: float
    width: float
    height: float
    kind: str
    title: str


@dataclass
class Chart:
    width: int
    height: int
    rects: list[Rect] = field(default_factory=list)
    # (x, y, text, anchor) of axis and row labels; anchor is SVG's text-anchor.
    labels: list[tuple[float, float, str, str]] = field(default_factory=list)


def _per_second(count: int) -> str:
    rate = count / 60
    return f"{rate:.2f}/s" if rate < 10 else f"{rate:.0f}/s"


def throughput(rows: Rows, width: int = 720, height: int = 160) -> Chart:
    """Jobs completed and died per minute of the last hour, stacked; the
    newest minute on the right (rows carry minutes_ago, 0 to 59)."""
    left, bottom = 56, 20
    chart = Chart(width, height)
    by_minute = {int(r["minutes_ago"]): r for r in rows if 0 <= int(r["minutes_ago"]) < 60}
    peak = max((int(r["completed"]) + int(r["died"]) for r in by_minute.values()), default=0)
    scale = (height - bottom - 8) / peak if peak else 0.0
    slot = (width - left) / 60
    for ago, row in sorted(by_minute.items()):
        x = left + (59 - ago) * slot
        y = float(height - bottom)
        for kind in ("completed", "died"):
            count = int(row[kind])
            if count:
                # A minute with one death among a thousand completions still
                # shows its death: at least MIN_BAR_PX tall (it was 1.5 px).
                h = max(count * scale, MIN_BAR_PX)
                y -= h
                chart.rects.append(Rect(x + 1, y, max(slot - 2, 1), h, kind,
                                        f"{ago} min ago: {count} {kind} ({_per_second(count)})"))
    chart.labels.append((left - 6, 12, _per_second(peak), "end"))
    chart.labels.append((left - 6, height - bottom, "0", "end"))
    chart.labels.append((left, height - 4, "60 min ago", "start"))
    chart.labels.append((width, height - 4, "now", "end"))
    return chart


def depth(queues: Rows, width: int = 720, row_height: int = 22) -> Chart:
    """Unfinished jobs of each queue by state, as stacked horizontal bars."""
    left = 160
    chart = Chart(width, row_height * max(len(queues), 1) + 4)
    peak = max((sum(int(q[s]) for s in STATES) for q in queues), default=0)
    scale = (width - left - 8) / peak if peak else 0.0
    for i, queue in enumerate(queues):
        x, y = float(left), i * row_height + 2.0
        for state in STATES:
            count = int(queue[state])
            if count:
                w = max(count * scale, 1.0)
                chart.rects.append(Rect(x, y, w, row_height - 6, state, f"{count} {state}"))
                x += w
        chart.labels.append((left - 8, y + row_height - 10, str(queue["name"]), "end"))
    return chart


def semaphores(leases: Rows) -> list[dict[str, Any]]:
    """Slots used of the limit, per semaphore (kind 'semaphore (max N)')."""
    found: dict[str, dict[str, Any]] = {}
    for lease in leases:
        kind = str(lease["kind"])
        if not kind.startswith("semaphore (max "):
            continue
        limit = int(kind.removeprefix("semaphore (max ").rstrip(")"))
        entry = found.setdefault(lease["name"], {"name": lease["name"], "limit": limit, "used": 0})
        entry["used"] += 1 if lease["is_held"] else 0
    return sorted(found.values(), key=lambda s: str(s["name"]))
