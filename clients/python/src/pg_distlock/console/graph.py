"""The wait-for graph laid out for SVG: holders on the left, each waiter one
column right of what it waits for, and the edges of a cycle (a deadlock
PostgreSQL has not broken yet) marked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..inspect import waitgraph
from ..inspect.reads import Rows

COLUMN, ROW, NODE_W, NODE_H = 300, 64, 170, 40


@dataclass
class Node:
    pid: int
    application: str
    x: float
    y: float
    holds: bool
    in_cycle: bool


@dataclass
class Edge:
    x1: float
    y1: float
    x2: float
    y2: float
    label: str
    in_cycle: bool


@dataclass
class Graph:
    width: int
    height: int
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    cycles: list[list[int]] = field(default_factory=list)


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


def layout(waits: Rows) -> Graph:
    cycles = waitgraph.cycles(waits)
    in_cycle = {pid for cycle in cycles for pid in cycle}
    cycle_edges = {(c[i], c[(i + 1) % len(c)]) for c in cycles for i in range(len(c))}
    column = _columns(waits)
    application: dict[int, Any] = {}
    for w in waits:
        application.setdefault(w["blocked_pid"], w["blocked_application"])
        application.setdefault(w["blocking_pid"], w["blocking_application"])
    blocked = {w["blocked_pid"] for w in waits}
    rows_used: dict[int, int] = {}
    position: dict[int, tuple[float, float]] = {}
    graph = Graph(0, 0, cycles=cycles)
    for pid in sorted(column, key=lambda p: (column[p], p)):
        row = rows_used.get(column[pid], 0)
        rows_used[column[pid]] = row + 1
        x, y = 10.0 + column[pid] * COLUMN, 10.0 + row * ROW
        position[pid] = (x, y)
        graph.nodes.append(Node(pid, str(application.get(pid) or ""), x, y, pid not in blocked, pid in in_cycle))
    for w in waits:
        (bx, by), (hx, hy) = position[w["blocked_pid"]], position[w["blocking_pid"]]
        # From the waiter's left edge to the holder's right edge (or, within a
        # column, from side to side).
        x1, x2 = (bx, hx + NODE_W) if bx > hx else (bx + NODE_W, hx) if bx < hx else (bx + NODE_W, hx + NODE_W)
        graph.edges.append(Edge(x1, by + NODE_H / 2, x2, hy + NODE_H / 2, str(w.get("lock") or w.get("locktype") or ""),
                                (w["blocked_pid"], w["blocking_pid"]) in cycle_edges))
    graph.width = int(max((n.x for n in graph.nodes), default=0) + NODE_W + 40)
    graph.height = int(max((n.y for n in graph.nodes), default=0) + NODE_H + 20)
    return graph
