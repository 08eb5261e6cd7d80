"""The wait-for graph laid out for SVG: holders on the left, each waiter one
column right of what it waits for, and the nodes and edges of a cycle (a
deadlock not broken yet: of backends, or of owners across their
connections) marked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from ..inspect import waitgraph
from ..inspect.reads import Rows
from ..inspect.untrusted import printable

COLUMN, NODE_W = 300, 170
# A node is two lines high, three when the graph shows owners.
NODE_H, OWNER_LINE, ROW_GAP = 40, 14, 24
# What fits a node's line (11px text in 170px), and a banner's name.
NODE_CHARS, BANNER_CHARS = 26, 60


@dataclass
class Name:
    """Untrusted text as shown: escaped (untrusted.printable), `shown` cut
    to fit, `full` for its tooltip. The template escapes both for HTML."""
    shown: str
    full: str


def name(text: str, width: int) -> Name:
    full = printable(text)
    return Name(full if len(full) <= width else full[:width - 1] + "…", full)


@dataclass
class Node:
    pid: int
    application: str
    x: float
    y: float
    holds: bool
    in_cycle: bool
    owner: Optional[Name] = None


@dataclass
class Edge:
    x1: float
    y1: float
    x2: float
    y2: float
    label: str
    in_cycle: bool


@dataclass
class OwnerDeadlock:
    """An owner cycle for the banner: its owners in order (a pid for a
    backend without owner), and its backends."""
    owners: list[Name]
    pids: list[int]


@dataclass
class Graph:
    width: int
    height: int
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    cycles: list[list[int]] = field(default_factory=list)
    owner_cycles: list[OwnerDeadlock] = field(default_factory=list)
    node_width: int = NODE_W
    node_height: int = NODE_H


def _columns(waits: Rows) -> dict[int, int]:
    pids = {w["blocked_pid"] for w in waits} | {w["blocking_pid"] for w in waits}
    column = {pid: 0 for pid in pids}
    # Longest path from a holder; cycles stop after as many rounds as nodes.
    for _ in range(len(pids)):
        changed = False
        for w in waits:
            want = column[w["blocking_pid"]] + 1
            if column[w["blocked_pid"]] < want <= len(pids):
                column[w["blocked_pid"]] = want
                changed = True
        if not changed:
            break
    return column


def _owner_deadlock(cycle: waitgraph.OwnerCycle) -> OwnerDeadlock:
    names = []
    for node in cycle.owners:
        if isinstance(node, int):
            names.append(Name(f"pid {node}", f"pid {node}"))
        else:
            shown = name(node, BANNER_CHARS)
            names.append(Name(f"owner {shown.shown}", shown.full))
    return OwnerDeadlock(names, list(cycle.pids))


def layout(waits: Rows) -> Graph:
    cycles = waitgraph.cycles(waits)
    owner_cycles = waitgraph.owner_cycles(waits)
    in_cycle = {pid for cycle in cycles for pid in cycle} | {pid for c in owner_cycles for pid in c.pids}
    cycle_edges = {(c[i], c[(i + 1) % len(c)]) for c in cycles for i in range(len(c))}
    cycle_edges |= {wait for c in owner_cycles for wait in c.waits}
    owner = waitgraph.owners(waits)
    column = _columns(waits)
    application: dict[int, Any] = {}
    for w in waits:
        application.setdefault(w["blocked_pid"], w["blocked_application"])
        application.setdefault(w["blocking_pid"], w["blocking_application"])
    blocked = {w["blocked_pid"] for w in waits}
    rows_used: dict[int, int] = {}
    position: dict[int, tuple[float, float]] = {}
    height = NODE_H + (OWNER_LINE if owner else 0)
    graph = Graph(0, 0, cycles=cycles, owner_cycles=[_owner_deadlock(c) for c in owner_cycles], node_height=height)
    for pid in sorted(column, key=lambda p: (column[p], p)):
        row = rows_used.get(column[pid], 0)
        rows_used[column[pid]] = row + 1
        x, y = 10.0 + column[pid] * COLUMN, 10.0 + row * (height + ROW_GAP)
        position[pid] = (x, y)
        shown = name(owner[pid], NODE_CHARS - len("owner ")) if pid in owner else None
        graph.nodes.append(Node(pid, str(application.get(pid) or ""), x, y, pid not in blocked, pid in in_cycle, shown))
    for w in waits:
        (bx, by), (hx, hy) = position[w["blocked_pid"]], position[w["blocking_pid"]]
        # From the waiter's left edge to the holder's right edge (or, within a
        # column, from side to side).
        x1, x2 = (bx, hx + NODE_W) if bx > hx else (bx + NODE_W, hx) if bx < hx else (bx + NODE_W, hx + NODE_W)
        graph.edges.append(Edge(x1, by + height / 2, x2, hy + height / 2, str(w.get("lock") or w.get("locktype") or ""),
                                (w["blocked_pid"], w["blocking_pid"]) in cycle_edges))
    graph.width = int(max((n.x for n in graph.nodes), default=0) + NODE_W + 40)
    graph.height = int(max((n.y for n in graph.nodes), default=0) + height + 20)
    return graph
