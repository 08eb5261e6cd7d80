from __future__ import annotations

import asyncio
import threading

import pg_distlock
from pg_distlock import aio
from conftest import Db, eventually
from test_leases import frozen_backend


class Events:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.log: list[tuple[str, str, object]] = []

    def recorder(self, node: str, kind: str):  # type: ignore[no-untyped-def]
        def record(value: object) -> None:
            with self.lock:
                self.log.append((node, kind, value))
        return record


def leader(db: Db, group: str, node: str, events: Events, **kwargs: object) -> pg_distlock.Leader:
    return pg_distlock.Leader(
        f"{db.dsn} application_name={group}-{node}", group, node, ttl=0.9,
        on_elected=events.recorder(node, "elected"), on_demoted=events.recorder(node, "demoted"), **kwargs,
    )


def test_one_leader_at_a_time_and_a_higher_term_after_it_resigns(db: Db, name: str) -> None:
    events = Events()
    a, b = leader(db, name, "a", events), leader(db, name, "b", events)
    with a:
        assert a.wait_elected(5)
        with b:
            assert not b.wait_elected(1.0)
            assert b.leader == "a"
            first_term = a.term
            a.stop()
            assert b.wait_elected(5)
            assert b.term is not None and first_term is not None and b.term > first_term
    kinds = [(node, kind) for node, kind, _ in events.log]
    assert kinds == [("a", "elected"), ("a", "demoted"), ("b", "elected"), ("b", "demoted")]


def test_a_leader_that_cannot_confirm_its_term_steps_down_within_the_ttl(db: Db, name: str) -> None:
    events = Events()
    a = leader(db, name, "a", events)
    with a:
        assert a.wait_elected(5)
        with frozen_backend(db, f"{name}-a"):
            eventually(lambda: not a.is_leader, timeout=2, what="local demotion")
            # is_leader turns false at the deadline; on_demoted follows on the node's thread.
            eventually(lambda: ("a", "demoted") in [(n, k) for n, k, _ in events.log], timeout=2, what="on_demoted")
            # The server's view: the term ran out, another node could now win.
            eventually(lambda: db.value(
                "SELECT NOT is_current FROM distlock.leaders WHERE group_name = %s", name), timeout=3)


async def test_async_leader(db: Db, name: str) -> None:
    elected = asyncio.Event()

    async def on_elected(term: int) -> None:
        elected.set()

    async with aio.Leader(db.dsn, name, "a", ttl=1, on_elected=on_elected) as a:
        await asyncio.wait_for(elected.wait(), 5)
        assert a.is_leader and await a.wait_elected(0.1)
    assert not a.is_leader
