"""Two real leader processes per run (tests/leader_node.py), each recording
the moments it reports leadership; a checker over both histories proves
that no two leaderships overlap, in every scenario that used to make two
leaders: a slow or raising on_elected, SIGKILL, and SIGSTOP of the leader
process or of its backend."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pg_distlock
from conftest import Db, eventually
from test_leases import frozen_backend

NODE = str(Path(__file__).with_name("leader_node.py"))
TTL = 0.6
SCENARIOS = ["slow", "raising", "sigkill", "sigstop_process", "sigstop_backend"]
RUNS = 20


class Node:
    def __init__(self, db: Db, group: str, node: str, scenario: str, history: Path, seconds: float) -> None:
        self.node = node
        self.history = history
        self.process = subprocess.Popen(
            [sys.executable, NODE, db.dsn, group, node, str(TTL), str(history), scenario, str(seconds)]
        )

    def records(self) -> list[tuple[float, float, int]]:
        if not self.history.exists():
            return []
        lines = self.history.read_text().splitlines()
        # The last line may be cut short by a SIGKILL.
        return [
            (float(b), float(a), int(t))
            for b, a, t in (line.split() for line in lines if line != "started" and len(line.split()) == 3)
        ]

    def leads(self) -> bool:
        return bool(self.records())

    def started(self) -> bool:
        return self.history.exists() and self.history.read_text().startswith("started")

    def wait(self, timeout: float = 20.0) -> int:
        return self.process.wait(timeout)


def overlaps(nodes: list[Node]) -> list[str]:
    """Each node's leadership of a term spans at least from the first
    moment it reported it (the read's end) to the last (the read's start);
    two such spans of different nodes must not overlap, and no term has two
    nodes."""
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    for node in nodes:
        for before, after, term in node.records():
            first, last = spans.get((node.node, term), (after, before))
            spans[(node.node, term)] = (min(first, after), max(last, before))
    problems = []
    terms: dict[int, str] = {}
    for (node, term), _ in spans.items():
        if terms.setdefault(term, node) != node:
            problems.append(f"term {term} reported by {terms[term]} and {node}")
    items = sorted(spans.items())
    for i, ((node_a, term_a), (start_a, end_a)) in enumerate(items):
        for (node_b, term_b), (start_b, end_b) in items[i + 1:]:
            if node_a != node_b and start_a < end_b and start_b < end_a:
                problems.append(
                    f"{node_a} (term {term_a}, {start_a:.3f}-{end_a:.3f}) and "
                    f"{node_b} (term {term_b}, {start_b:.3f}-{end_b:.3f}) both led"
                )
    return problems


def run_scenario(db: Db, tmp: Path, run: int, scenario: str) -> None:
    group = f"g{run}"
    a = Node(db, group, "a", "slow" if scenario == "slow" else "raising" if scenario == "raising" else "plain",
             tmp / f"{run}-a", seconds=6 * TTL)
    try:
        if scenario == "raising":
            eventually(a.started, timeout=10, what="a starts")
        else:
            eventually(a.leads, timeout=10, what="a leads")
        b = Node(db, group, "b", "plain", tmp / f"{run}-b", seconds=8 * TTL)
        eventually(b.started, timeout=10, what="b starts")
        if scenario == "slow":
            assert a.wait() == 0
        elif scenario == "raising":
            assert a.wait() == 3, "stop() raises what on_elected raised"
            eventually(b.leads, timeout=10, what="b leads once a resigned")
        elif scenario == "sigkill":
            a.process.kill()
            a.wait()
            eventually(b.leads, timeout=10, what="b leads after a died")
        elif scenario == "sigstop_process":
            os.kill(a.process.pid, signal.SIGSTOP)
            try:
                eventually(b.leads, timeout=10, what="b leads while a is frozen")
            finally:
                os.kill(a.process.pid, signal.SIGCONT)
            assert a.wait() == 0
        elif scenario == "sigstop_backend":
            with frozen_backend(db, "leader-a"):
                eventually(b.leads, timeout=10, what="b leads while a's backend is frozen")
            assert a.wait() == 0
        assert b.wait() == 0
        problems = overlaps([a, b])
        assert not problems, f"{scenario}: {problems}"
        if scenario == "slow":
            # a's on_elected took 3 TTLs: a kept its one term until it stopped.
            first, last = a.records()[0][1], a.records()[-1][0]
            assert last - first > 4 * TTL, f"a led only {last - first:.2f} s of its {6 * TTL:g} s"
            assert len({term for _, _, term in a.records()}) == 1
    finally:
        for node in [a] + ([b] if "b" in locals() else []):
            if node.process.poll() is None:
                node.process.kill()
                node.process.wait()


@pytest.mark.timeout(600)
def test_two_processes_never_both_lead(db: Db, tmp_path: Path) -> None:
    for run in range(RUNS):
        run_scenario(db, tmp_path, run, SCENARIOS[run % len(SCENARIOS)])


def test_the_checker_sees_two_leaders(tmp_path: Path) -> None:
    class Fake(Node):
        def __init__(self, node: str, lines: str) -> None:
            self.node = node
            self.history = tmp_path / node
            self.history.write_text(lines)

    assert overlaps([Fake("a", "started\n1.0 1.1 7\n2.0 2.1 7\n"), Fake("b", "started\n3.0 3.1 8\n")]) == []
    assert overlaps([Fake("a", "1.0 1.1 7\n2.0 2.1 7\n"), Fake("b", "1.5 1.6 8\n1.9 1.95 8\n")])
    assert overlaps([Fake("a", "1.0 1.1 7\n"), Fake("b", "5.0 5.1 7\n")]) == ["term 7 reported by a and b"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_makes_the_leader_resign_before_the_process_ends(db: Db, tmp_path: Path, sig: int) -> None:
    # A TTL long enough that only a resignation ends the term before the check.
    node = subprocess.Popen(
        [sys.executable, NODE, db.dsn, "g", "a", "30", str(tmp_path / "a"), "signals", "60"],
    )
    try:
        eventually(lambda: (tmp_path / "a").exists() and len((tmp_path / "a").read_text().splitlines()) > 1,
                   timeout=10, what="a leads")
        node.send_signal(sig)
        node.wait(10)
        assert db.value("SELECT count(*) FROM distlock.leaders WHERE group_name = 'g' AND is_current") == 0
    finally:
        if node.poll() is None:
            node.kill()
            node.wait()


def test_start_fails_fast_without_the_extension(db: Db) -> None:
    db.admin.execute("DROP EXTENSION pg_distlock")
    leader = pg_distlock.Leader(db.dsn, "g", "a", ttl=1)
    with pytest.raises(pg_distlock.NotInstalled, match=f"run CREATE EXTENSION pg_distlock in database '{db.name}'"):
        leader.start()


def test_a_slow_callback_never_delays_renewal_in_process(db: Db, name: str) -> None:
    started = time.monotonic()
    calls: list[int] = []

    def on_elected(term: int) -> None:
        calls.append(term)
        time.sleep(3 * TTL)

    with pg_distlock.Leader(db.dsn, name, "a", ttl=TTL, on_elected=on_elected) as a:
        assert a.wait_elected(5)
        time.sleep(3.5 * TTL)
        assert a.is_leader and calls == [a.term], "still leading after its slow callback"
        assert db.value("SELECT leader FROM distlock.leaders WHERE group_name = %s AND is_current", name) == "a"
    assert time.monotonic() - started < 10
