"""The wait-for graph as text: who holds, who waits behind whom, and any
cycle: of backends (a deadlock PostgreSQL has not yet broken), or of owners
across their connections (one pg_distlock breaks, which PostgreSQL's graph
does not show)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator, Optional, Union

from .cycles import simple_cycles
from .reads import Rows
from .untrusted import printable

# A node of the owner-level graph: the owner (distlock.owner) a backend
# published, or, for a backend without one, its pid (it is its own owner).
Node = Union[str, int]


def _edges(waits: Rows) -> dict[int, list[dict[str, Any]]]:
    """For each blocking pid, the waits it causes."""
    behind: dict[int, list[dict[str, Any]]] = {}
    for wait in waits:
        behind.setdefault(wait["blocking_pid"], []).append(wait)
    return behind


def cycles(waits: Rows) -> list[list[int]]:
    """Each cycle of waits once, starting at its lowest pid."""
    return simple_cycles(((w["blocked_pid"], w["blocking_pid"]) for w in waits), key=lambda pid: pid)


def owners(waits: Rows) -> dict[int, str]:
    """Each backend's owner, where it published one. Servers before 0.4.0
    have no owner columns: every backend is then its own owner."""
    found: dict[int, str] = {}
    for wait in waits:
        for side in ("blocked", "blocking"):
            owner = wait.get(f"{side}_owner")
            if owner is not None:
                found.setdefault(wait[f"{side}_pid"], str(owner))
    return found


@dataclass(frozen=True)
class OwnerCycle:
    owners: tuple[Node, ...]  # in the order they wait, from the least (names before pids)
    pids: tuple[int, ...]  # every backend on it, waiting or holding
    waits: tuple[tuple[int, int], ...]  # (blocked_pid, blocking_pid) of each wait on it


def _node_key(node: Node) -> tuple[bool, Node]:
    return isinstance(node, int), node


def owner_cycles(waits: Rows) -> list[OwnerCycle]:
    """Each cycle of owners once: owner A's connection waits for one of B's
    while one of B's waits for one of A's (or A waits, on one connection,
    for a lock it holds on another). A cycle with one backend per owner is
    a cycle of backends, PostgreSQL's own deadlock (cycles() has it, and
    pg_distlock leaves it to PostgreSQL too), so it is not repeated here."""
    owner = owners(waits)

    def node(pid: int) -> Node:
        return owner.get(pid, pid)

    between: dict[tuple[Node, Node], set[tuple[int, int]]] = {}
    for wait in waits:
        blocked, blocking = int(wait["blocked_pid"]), int(wait["blocking_pid"])
        between.setdefault((node(blocked), node(blocking)), set()).add((blocked, blocking))
    found = []
    for cycle in simple_cycles(between, key=_node_key):
        hops = zip(cycle, cycle[1:] + cycle[:1])
        on = sorted(pair for hop in hops for pair in between[hop])
        pids = sorted({pid for pair in on for pid in pair})
        if len(pids) > len(cycle):
            found.append(OwnerCycle(tuple(cycle), tuple(pids), tuple(on)))
    return found


def _node_name(node: Node) -> str:
    return f"pid {node}" if isinstance(node, int) else f"owner {printable(node)}"


def _owner_deadlock(cycle: OwnerCycle) -> str:
    path = " -> ".join(_node_name(node) for node in cycle.owners + cycle.owners[:1])
    return (f"DEADLOCK across connections: {path} (pids {', '.join(map(str, cycle.pids))});"
            " pg_distlock breaks it after deadlock_timeout")


def _name(pid: int, application: Any, owner: Optional[str]) -> str:
    name = f"pid {pid} ({printable(str(application))})" if application else f"pid {pid}"
    return f"{name} owner {printable(owner)}" if owner is not None else name


def draw(waits: Rows) -> Iterator[str]:
    if not waits:
        yield "(no session waits for a lock)"
        return
    behind = _edges(waits)
    blocked = {w["blocked_pid"] for w in waits}
    roots = sorted({w["blocking_pid"] for w in waits} - blocked)
    owner = owners(waits)

    # Each session's waiters are listed once, under the first place it shows:
    # pg_blocking_pids makes each of N sessions queued on one lock wait for
    # every one ahead, and listing every path drew 2^N lines.
    expanded: set[int] = set()

    def subtree(pid: int, indent: str) -> Iterator[str]:
        expanded.add(pid)
        children = behind.get(pid, [])
        for i, wait in enumerate(children):
            last = i == len(children) - 1
            waiting = wait["waiting_for"]
            since = f" for {str(waiting).split('.')[0]}" if waiting is not None else ""
            what = (f"{wait['locktype'] or 'lock'} {printable(str(wait['lock']))}" if wait["lock"]
                    else (wait["locktype"] or "a lock"))
            waiter = _name(wait["blocked_pid"], wait["blocked_application"], owner.get(wait["blocked_pid"]))
            shown_before = wait["blocked_pid"] in expanded and behind.get(wait["blocked_pid"])
            yield f"{indent}{'└─' if last else '├─'} {waiter} waits{since} on {what}{' (see above)' if shown_before else ''}"
            if wait["blocked_pid"] not in expanded:
                yield from subtree(wait["blocked_pid"], indent + ("   " if last else "│  "))

    application = {w["blocking_pid"]: w["blocking_application"] for w in waits}
    for root in roots:
        yield f"{_name(root, application.get(root), owner.get(root))} holds"
        yield from subtree(root, "")
    for cycle in cycles(waits):
        yield "DEADLOCK " + " -> ".join(f"pid {pid}" for pid in cycle + cycle[:1])
    for owner_cycle in owner_cycles(waits):
        yield _owner_deadlock(owner_cycle)
