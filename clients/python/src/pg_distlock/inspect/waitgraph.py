"""The wait-for graph as text: who holds, who waits behind whom, and any
cycle (a deadlock PostgreSQL has not yet broken)."""

from __future__ import annotations

from typing import Any, Iterator

from .reads import Rows


def _edges(waits: Rows) -> dict[int, list[dict[str, Any]]]:
    """For each blocking pid, the waits it causes."""
    behind: dict[int, list[dict[str, Any]]] = {}
    for wait in waits:
        behind.setdefault(wait["blocking_pid"], []).append(wait)
    return behind


def cycles(waits: Rows) -> list[list[int]]:
    """Each cycle of waits once, starting at its lowest pid."""
    waits_for: dict[int, set[int]] = {}
    for wait in waits:
        waits_for.setdefault(wait["blocked_pid"], set()).add(wait["blocking_pid"])
    found: set[tuple[int, ...]] = set()

    def walk(pid: int, path: list[int]) -> None:
        for nxt in sorted(waits_for.get(pid, ())):
            if nxt in path:
                cycle = path[path.index(nxt):]
                start = cycle.index(min(cycle))
                found.add(tuple(cycle[start:] + cycle[:start]))
            else:
                walk(nxt, path + [nxt])

    for pid in sorted(waits_for):
        walk(pid, [pid])
    return [list(cycle) for cycle in sorted(found)]


def _name(pid: int, application: Any) -> str:
    return f"pid {pid} ({application})" if application else f"pid {pid}"


def draw(waits: Rows) -> Iterator[str]:
    if not waits:
        yield "(no session waits for a lock)"
        return
    behind = _edges(waits)
    blocked = {w["blocked_pid"] for w in waits}
    roots = sorted({w["blocking_pid"] for w in waits} - blocked)

    def subtree(pid: int, indent: str, seen: frozenset[int]) -> Iterator[str]:
        children = behind.get(pid, [])
        for i, wait in enumerate(children):
            last = i == len(children) - 1
            waiting = wait["waiting_for"]
            since = f" for {str(waiting).split('.')[0]}" if waiting is not None else ""
            what = f"{wait['locktype'] or 'lock'} {wait['lock']}" if wait["lock"] else (wait["locktype"] or "a lock")
            yield (f"{indent}{'└─' if last else '├─'} {_name(wait['blocked_pid'], wait['blocked_application'])}"
                   f" waits{since} on {what}")
            if wait["blocked_pid"] not in seen:
                yield from subtree(wait["blocked_pid"], indent + ("   " if last else "│  "), seen | {wait["blocked_pid"]})

    application = {w["blocking_pid"]: w["blocking_application"] for w in waits}
    for root in roots:
        yield f"{_name(root, application.get(root))} holds"
        yield from subtree(root, "", frozenset({root}))
    for cycle in cycles(waits):
        yield "DEADLOCK " + " -> ".join(f"pid {pid}" for pid in cycle + cycle[:1])
