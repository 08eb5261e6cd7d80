"""Every simple cycle of a directed graph, each once, starting at its least
node. Johnson's algorithm, run only inside strongly connected components:
its time grows with the cycles found, not with the paths, which matters
because pg_blocking_pids makes each of N sessions queued on one lock wait
for every one ahead of it (2^N paths, no cycle)."""

from __future__ import annotations

from typing import Any, Callable, Hashable, Iterable, TypeVar

N = TypeVar("N", bound=Hashable)

# More cycles than anyone reads on a page; the search stops there, so that a
# pathological graph still answers (the first ones found, in node order).
MAX_CYCLES = 100

Graph = dict[int, list[int]]


def _components(graph: Graph, members: set[int]) -> list[list[int]]:
    """Tarjan's strongly connected components of `graph` within `members`
    (iterative: a long chain of waits must not hit the recursion limit),
    only those with two nodes or more."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    found: list[list[int]] = []
    for root in sorted(members):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter([n for n in graph[root] if n in members]))]
        while work:
            node, nexts = work[-1]
            for nxt in nexts:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter([n for n in graph[nxt] if n in members])))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: list[int] = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _circuits(graph: Graph, members: set[int], start: int, limit: int) -> list[tuple[int, ...]]:
    """The cycles through `start` within `members` (Johnson's circuit
    search, iterative), at most `limit` of them."""
    out: list[tuple[int, ...]] = []
    path = [start]
    blocked = {start}
    closed: set[int] = set()
    waiting_on: dict[int, set[int]] = {}
    stack = [(start, iter([n for n in graph[start] if n in members]))]
    while stack and len(out) < limit:
        node, nexts = stack[-1]
        nxt = next(nexts, None)
        if nxt is not None:
            if nxt == start:
                out.append(tuple(path))
                closed.update(path)
            elif nxt not in blocked:
                path.append(nxt)
                blocked.add(nxt)
                closed.discard(nxt)
                stack.append((nxt, iter([n for n in graph[nxt] if n in members])))
            continue
        if node in closed:
            # A cycle went through it: free it, and what waited for it to be freed.
            free = {node}
            while free:
                done = free.pop()
                if done in blocked:
                    blocked.discard(done)
                    free |= waiting_on.pop(done, set())
        else:
            for n in graph[node]:
                if n in members:
                    waiting_on.setdefault(n, set()).add(node)
        stack.pop()
        path.pop()
    return out


def simple_cycles(edges: Iterable[tuple[N, N]], key: Callable[[N], Any]) -> list[list[N]]:
    """Each cycle of the graph `edges` once, rotated to start at its least
    node by `key`, the cycles in order of their nodes' keys. A node's edge
    to itself is a cycle of one."""
    successors: dict[N, set[N]] = {}
    for a, b in edges:
        successors.setdefault(a, set()).add(b)
        successors.setdefault(b, set())
    # The search works on ranks: its order, and so what it finds first, is
    # the nodes' order, never the order of the rows.
    nodes = sorted(successors, key=key)
    rank = {node: i for i, node in enumerate(nodes)}
    graph: Graph = {rank[a]: sorted(rank[b] for b in successors[a] if b != a) for a in successors}
    found: list[tuple[int, ...]] = [(rank[a],) for a in nodes if a in successors[a]]
    pending = _components(graph, set(graph))
    while pending and len(found) < MAX_CYCLES:
        pending.sort()
        component = pending.pop(0)
        # Its least node: every cycle through it, then the rest without it.
        found += _circuits(graph, set(component), component[0], MAX_CYCLES - len(found))
        pending += _components(graph, set(component[1:]))
    return [[nodes[i] for i in cycle] for cycle in sorted(found)[:MAX_CYCLES]]
