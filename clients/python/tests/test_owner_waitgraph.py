"""Deadlocks across connections in the wait-for graph, from synthetic rows
of distlock.lock_waits (no server needed): connections of one owner
(distlock.owner) are one node, and a cycle of such nodes is marked by
`pg-distlock locks` and the console, which found cycles of pids only."""

from __future__ import annotations

import io
import json
import time
from typing import Any, Optional

import pytest

from pg_distlock.cli import render
from pg_distlock.console import create_app
from pg_distlock.console.graph import layout
from pg_distlock.inspect import waitgraph


def wait(blocked: int, blocking: int, blocked_owner: Optional[str] = None, blocking_owner: Optional[str] = None,
         lock: str = "k") -> dict[str, Any]:
    return {"blocked_pid": blocked, "blocked_application": f"app{blocked}", "blocking_pid": blocking,
            "blocking_application": f"app{blocking}", "locktype": "advisory", "lock": lock, "waiting_for": None,
            "blocked_owner": blocked_owner, "blocking_owner": blocking_owner}


def older_server(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as a 0.3.0 server gives them: no owner columns at all."""
    return [{k: v for k, v in row.items() if not k.endswith("_owner")} for row in rows]


# P1 holds ledger-A on pid 11 and waits for ledger-B on pid 12; P2 holds
# ledger-B on pid 21 and waits for ledger-A on pid 22.
INVERSION = [wait(12, 21, "P1", "P2", "ledger-B"), wait(22, 11, "P2", "P1", "ledger-A")]


def cycles_of(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(c.owners, c.pids, c.waits) for c in waitgraph.owner_cycles(rows)]


def test_two_owners_inverting_across_four_connections_are_one_owner_cycle() -> None:
    assert waitgraph.cycles(INVERSION) == [], "no cycle of pids: PostgreSQL sees none"
    assert cycles_of(INVERSION) == [(("P1", "P2"), (11, 12, 21, 22), ((12, 21), (22, 11)))]
    # Found once, from either end and in any row order.
    assert cycles_of(INVERSION[::-1]) == cycles_of(INVERSION)


def test_three_owners_in_a_cycle_start_at_the_least_owner() -> None:
    rows = [wait(31, 12, "C", "A"), wait(11, 22, "A", "B"), wait(21, 32, "B", "C")]
    assert cycles_of(rows) == [(("A", "B", "C"), (11, 12, 21, 22, 31, 32), ((11, 22), (21, 32), (31, 12)))]


def test_a_chain_of_owners_is_no_cycle() -> None:
    rows = [wait(12, 21, "P1", "P2"), wait(22, 31, "P2", "P3"), wait(41, 21, None, "P2")]
    assert cycles_of(rows) == [] and waitgraph.cycles(rows) == []
    assert not any(line.startswith("DEADLOCK") for line in waitgraph.draw(rows))


def test_one_owner_waiting_on_one_connection_for_its_own_other_connection_is_a_cycle_of_one() -> None:
    rows = [wait(12, 11, "solo", "solo")]
    assert cycles_of(rows) == [(("solo",), (11, 12), ((12, 11),))]
    assert list(waitgraph.draw(rows))[-1] == (
        "DEADLOCK across connections: owner solo -> owner solo (pids 11, 12);"
        " pg_distlock breaks it after deadlock_timeout")


def test_a_cycle_of_backends_without_owners_is_postgresqls_own_deadlock_only() -> None:
    rows = [wait(5, 6), wait(6, 7), wait(7, 5)]
    assert waitgraph.cycles(rows) == [[5, 6, 7]]
    assert cycles_of(rows) == []
    # Nor when the backends have owners but each owner one backend: the
    # server leaves that cycle to PostgreSQL, and the page names it once.
    owned = [wait(5, 6, "A", "B"), wait(6, 5, "B", "A")]
    assert waitgraph.cycles(owned) == [[5, 6]] and cycles_of(owned) == []


def test_a_backend_without_owner_in_an_owner_cycle_stands_for_itself() -> None:
    rows = [wait(11, 50, "A", None), wait(50, 12, None, "A")]
    assert cycles_of(rows) == [(("A", 50), (11, 12, 50), ((11, 50), (50, 12)))]
    assert "owner A -> pid 50 -> owner A (pids 11, 12, 50)" in list(waitgraph.draw(rows))[-1]


def test_rows_of_an_older_server_have_no_owner_cycles_and_still_render() -> None:
    rows = older_server(INVERSION)
    assert waitgraph.owner_cycles(rows) == [] and waitgraph.owners(rows) == {}
    lines = list(waitgraph.draw(rows))
    assert lines[0] == "pid 11 (app11) holds" and not any("owner" in line for line in lines)
    out = io.StringIO()
    render.locks([], rows, True, out)
    report = json.loads(out.getvalue())
    assert report["deadlocks"] == [] and report["owner_deadlocks"] == []
    graph = layout(rows)
    assert not any(n.in_cycle or n.owner for n in graph.nodes) and graph.owner_cycles == []


def test_the_text_names_each_backends_owner_and_the_cycle_across_connections() -> None:
    lines = list(waitgraph.draw(INVERSION))
    assert "pid 11 (app11) owner P1 holds" in lines
    assert "└─ pid 22 (app22) owner P2 waits on advisory ledger-A" in lines
    assert lines[-1] == ("DEADLOCK across connections: owner P1 -> owner P2 -> owner P1 (pids 11, 12, 21, 22);"
                         " pg_distlock breaks it after deadlock_timeout")
    out = io.StringIO()
    render.locks([], INVERSION, True, out)
    report = json.loads(out.getvalue())
    assert report["deadlocks"] == []
    assert report["owner_deadlocks"] == [{"owners": ["P1", "P2"], "pids": [11, 12, 21, 22],
                                          "waits": [[12, 21], [22, 11]]}]


def test_an_owner_name_cannot_break_the_terminal() -> None:
    hostile = "evil\n\x1b[2J\x1b[31mDEADLOCK\r\x07"
    rows = [wait(12, 21, hostile, "P2"), wait(22, 11, "P2", hostile)]
    out, plain = io.StringIO(), io.StringIO()
    render.locks([], rows, False, out)
    render.locks([], INVERSION, False, plain)
    text = out.getvalue()
    assert "\x1b" not in text and "\r" not in text and "\x07" not in text
    assert len(text.splitlines()) == len(plain.getvalue().splitlines()), "no line of its own"
    assert ("DEADLOCK across connections: owner P2 -> owner evil\\n\\x1b[2J\\x1b[31mDEADLOCK\\r\\x07 -> owner P2"
            " (pids 11, 12, 21, 22)") in text
    assert "pid 11 (app11) owner evil\\n\\x1b[2J\\x1b[31mDEADLOCK\\r\\x07 holds" in text


def test_the_console_marks_an_owner_cycles_nodes_and_waits() -> None:
    rows = INVERSION + [wait(40, 11, None, "P1")]  # one more waiter, not on the cycle
    graph = layout(rows)
    assert {n.pid for n in graph.nodes if n.in_cycle} == {11, 12, 21, 22}
    assert sorted((e.label, e.in_cycle) for e in graph.edges) == [("k", False), ("ledger-A", True), ("ledger-B", True)]
    assert [([o.shown for o in c.owners], c.pids) for c in graph.owner_cycles] == [
        (["owner P1", "owner P2"], [11, 12, 21, 22])]
    owners = {n.pid: n.owner and n.owner.shown for n in graph.nodes}
    assert owners == {11: "P1", 12: "P1", 21: "P2", 22: "P2", 40: None}
    assert graph.node_height > 40, "room for the owner's line"


def test_a_long_owner_is_cut_to_fit_its_node_and_whole_in_its_tooltip() -> None:
    long = "billing-worker/" + "host-with-a-very-long-name.example.internal:4242:9f8e7d6c/thread-17"
    graph = layout([wait(12, 21, long, "P2"), wait(22, 11, "P2", long)])
    node = next(n for n in graph.nodes if n.pid == 11)
    assert node.owner is not None and node.owner.full == long
    assert len(node.owner.shown) <= 20 and node.owner.shown.endswith("…")
    xs = sorted({n.x for n in graph.nodes})
    assert xs[1] - xs[0] >= graph.node_width, "columns do not overlap however long the owner"
    banner = graph.owner_cycles[0].owners[1]  # P2 first: the least name
    assert banner.full == long and len(banner.shown) <= len("owner ") + 60


def test_the_locks_page_escapes_hostile_owners() -> None:
    script, ansi = "<script>alert(1)</script>", "evil\n\x1b[31mred"
    rows = [wait(12, 21, script, ansi), wait(22, 11, ansi, script)]
    console = create_app("").state.console
    page = console.templates.get_template("locks_main.html").render(
        waits=rows, graph=layout(rows), locks=[], lock_stats=[], lock_stats_unavailable=None, admin=False)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\x1b" not in page and "evil\\n\\x1b[31mred" in page
    assert page.count('class="deadlock owner-deadlock"') == 1 and 'data-pids="11 12 21 22"' in page


@pytest.mark.timeout(20)
def test_many_sessions_queued_on_one_lock_are_read_at_once() -> None:
    """pg_blocking_pids makes each of N sessions queued on one lock wait
    for every one ahead of it: 2^N paths (the search walked them all, the
    console's /locks page with it), and no cycle."""
    queue = [wait(100 + k, 100 + ahead, f"w{k}", f"w{ahead}") for k in range(1, 41) for ahead in range(k)]
    started = time.monotonic()
    assert waitgraph.cycles(queue) == [] and waitgraph.owner_cycles(queue) == []
    assert layout(queue).cycles == []
    assert time.monotonic() - started < 5
