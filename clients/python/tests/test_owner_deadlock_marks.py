"""A deadlock across connections, live: two owners (distlock.owner), each
holding one lock on one connection and waiting for the other's lock on a
second. PostgreSQL's graph has no cycle there; `pg-distlock locks` and the
console's /locks page mark the owners' cycle, and show the owners' names
(any text a connection sets) as text."""

from __future__ import annotations

import contextlib
import html
import json
import re
import threading
import uuid
from typing import Iterator

import psycopg
from selenium.webdriver.remote.webdriver import WebDriver

from conftest import Db, connect, eventually, lock_wait_chain, new_database, drop_database
from test_browser import browser, count, text, texts  # noqa: F401 - browser is a fixture
from test_cli import cli, cli_json
from test_console import console

SCRIPT = "<script>alert(1)</script>"
ANSI = "evil\n\x1b[31mred"


@contextlib.contextmanager
def owner_inversion(db: Db, first: str, second: str) -> Iterator[dict[str, int]]:
    """`first` holds inv-A on connection a-hold and waits for inv-B on
    a-wait; `second` holds inv-B on b-hold and waits for inv-A on b-wait.
    The waiting connections set deadlock_timeout to 10 minutes (the test
    role is a superuser), after which pg_distlock would break the cycle: it
    stays until the waits are cancelled on the way out. The pids by name."""
    conns: dict[str, psycopg.Connection] = {}
    threads: list[threading.Thread] = []
    errors: list[BaseException] = []

    def open_as(name: str, owner: str) -> psycopg.Connection:
        conn = conns[name] = connect(db.dsn + f" application_name={name}")
        conn.execute("SELECT pg_catalog.set_config('distlock.owner', %s, false)", (owner,))
        return conn

    def wait(conn: psycopg.Connection, key: str) -> None:
        try:
            conn.execute("SELECT distlock.lock(%s)", (key,))
            errors.append(AssertionError(f"{key} was granted: no cycle"))
        except psycopg.errors.QueryCanceled:
            pass  # the way out
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)

    try:
        open_as("a-hold", first).execute("SELECT distlock.lock('inv-A')")
        open_as("b-hold", second).execute("SELECT distlock.lock('inv-B')")
        for name, owner, key in (("a-wait", first, "inv-B"), ("b-wait", second, "inv-A")):
            open_as(name, owner).execute("SET deadlock_timeout = '10min'")
            threads.append(threading.Thread(target=wait, args=(conns[name], key)))
            threads[-1].start()
        pids = {name: conn.info.backend_pid for name, conn in conns.items()}
        eventually(lambda: db.value("SELECT count(*) FROM distlock.lock_waits WHERE blocked_pid IN (%s, %s)",
                                    pids["a-wait"], pids["b-wait"]) == 2, what="both waits in distlock.lock_waits")
        yield pids
    finally:
        for name in ("a-wait", "b-wait"):
            if name in conns:
                db.admin.execute("SELECT pg_catalog.pg_cancel_backend(%s)", (conns[name].info.backend_pid,))
        for thread in threads:
            thread.join(timeout=30)
        for conn in conns.values():
            conn.close()
    assert not errors, errors


def test_locks_lists_the_owner_cycle_with_both_owners_and_the_four_pids(db: Db) -> None:
    first, second = "svc-a/host:101:0a0a0a0a/thread-1", "svc-b/host:202:0b0b0b0b/thread-1"
    with owner_inversion(db, first, second) as pids:
        report = cli_json(db, "locks")
        assert report["deadlocks"] == [], "no cycle of pids"
        assert report["owner_deadlocks"] == [{
            "owners": [first, second], "pids": sorted(pids.values()),
            "waits": sorted([[pids["a-wait"], pids["b-hold"]], [pids["b-wait"], pids["a-hold"]]]),
        }]
        # (lock_waits shows waits of the cluster's other databases too.)
        ours = [w for w in report["waits"] if w["blocked_pid"] in pids.values()]
        assert sorted((w["blocked_owner"], w["blocking_owner"]) for w in ours) == [(first, second), (second, first)], ours
        code, out = cli(db, "locks")
        assert code == 0, out
        assert (f"DEADLOCK across connections: owner {first} -> owner {second} -> owner {first}"
                f" (pids {', '.join(map(str, sorted(pids.values())))}); pg_distlock breaks it after deadlock_timeout"
                in out.splitlines()), out
        assert f"pid {pids['a-hold']} (a-hold) owner {first} holds" in out
        assert re.search(rf"pid {pids['b-wait']} \(b-wait\) owner {re.escape(second)} waits( for \S+)? on advisory inv-A",
                         out), out


def test_the_locks_page_marks_the_cycle_and_shows_hostile_owners_as_text(db: Db) -> None:
    with owner_inversion(db, SCRIPT, ANSI) as pids, console(db.dsn) as (client, _):
        page = client.get("/locks").text
        assert "<script>alert" not in page and html.escape(SCRIPT, quote=False) in page
        assert "\x1b" not in page and "evil\\n\\x1b[31mred" in page
        banner = re.search(r'<p class="deadlock owner-deadlock"[^>]*>(.*?)</p>', page, re.S)
        assert banner, page
        words = " ".join(html.unescape(re.sub(r"<[^>]+>", "", banner.group(1))).split())
        assert words.startswith(f"Deadlock across connections: owner {SCRIPT} → owner evil\\n\\x1b[31mred → owner {SCRIPT}")
        for pid in pids.values():
            assert re.search(rf'<g class="node[^"]* cycle" data-pid="{pid}">', page), pid
        assert page.count('class="edge cycle"') == 2


def test_an_operator_sees_the_deadlock_across_connections_in_the_browser(db: Db, browser: WebDriver) -> None:
    with owner_inversion(db, SCRIPT, ANSI) as pids, console(db.dsn) as (client, _):
        browser.get(str(client.base_url).rstrip("/") + "/locks")
        eventually(lambda: count(browser, "svg g.node.cycle") == 4, timeout=20, what="the four sessions marked")
        assert count(browser, "svg g.edge.cycle") == 2
        assert {int(p) for p in browser.execute_script(
            "return Array.from(document.querySelectorAll('svg g.node.cycle'), g => g.dataset.pid)")} == set(pids.values())
        banner = " ".join(text(browser, "p.owner-deadlock").split())
        assert f"owner {SCRIPT} → owner evil\\n\\x1b[31mred → owner {SCRIPT}" in banner, banner
        # The name is text: no element came of it, and no script ran.
        assert count(browser, "main script") == 0
        assert browser.execute_script("return document.querySelectorAll('script').length") == 1
        # Each node's owner, cut to fit, and whole in its tooltip.
        owners = texts(browser, "svg text.owner")
        assert sorted(owners) == sorted([f"owner {SCRIPT[:19]}…"] * 2 + ["owner evil\\n\\x1b[31mred"] * 2), owners
        tips = texts(browser, f'svg g.node[data-pid="{pids["a-hold"]}"] > title')
        assert tips == [f"pid {pids['a-hold']} a-hold, owner {SCRIPT}"], tips


def test_a_scoped_monitor_sees_owners_in_its_scope_only(db: Db) -> None:
    """An owner outside the monitor's scope reads NULL (no stand-in label,
    which would let a tenant confirm guesses of another's names), so a cycle
    through it is not marked for that monitor; in-scope owners' cycles are."""
    role = f"mon_{uuid.uuid4().hex[:8]}"
    db.admin.execute(f"CREATE ROLE {role} LOGIN")
    db.admin.execute("SELECT distlock.grant_capability(%s, 'monitor', 'inv-')", (role,))
    # Other roles' waits show in pg_stat_activity, and so in lock_waits, only with it.
    db.admin.execute(f"GRANT pg_read_all_stats TO {role}")
    try:
        with owner_inversion(db, "inv-tenant/w1", "inv-tenant/w2") as pids:
            report = cli_json(db, "locks", dsn=f"{db.dsn} user={role}")
            (cycle,) = report["owner_deadlocks"]
            assert sorted(cycle["owners"]) == ["inv-tenant/w1", "inv-tenant/w2"], cycle
            assert cycle["pids"] == sorted(pids.values())
        with owner_inversion(db, "inv-tenant/w1", "other-tenant/w2") as pids:
            report = cli_json(db, "locks", dsn=f"{db.dsn} user={role}")
            assert report["owner_deadlocks"] == [], report
            ours = [w for w in report["waits"] if w["blocked_pid"] in pids.values()]
            assert {w["blocked_owner"] for w in ours} == {"inv-tenant/w1", None}, ours
            assert "other-tenant" not in json.dumps(report)
    finally:
        db.admin.execute(f"DROP OWNED BY {role}")
        db.admin.execute(f"DROP ROLE {role}")


def test_an_older_server_without_owner_columns_still_answers() -> None:
    db = new_database(version="0.3.0")
    try:
        assert db.value("SELECT count(*) FROM pg_attribute WHERE attrelid = 'distlock.lock_waits'::regclass"
                        " AND attname LIKE '%%owner'") == 0
        with lock_wait_chain(db, "old:1", waiters=1):
            report = eventually(lambda: (r := cli_json(db, "locks")) and any(
                w["blocked_application"] == "waiter0" for w in r["waits"]) and r, what="the wait")
            assert isinstance(report, dict)
            assert report["owner_deadlocks"] == [] and report["deadlocks"] == []
            assert {(w["blocked_owner"], w["blocking_owner"]) for w in report["waits"]} == {(None, None)}
            code, out = cli(db, "locks")
            ours = [line for line in out.splitlines() if "(holder)" in line or "(waiter0)" in line]
            assert code == 0 and len(ours) == 2 and not any(" owner " in line for line in ours), out
    finally:
        drop_database(db)

