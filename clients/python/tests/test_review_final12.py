"""Final review 12 of the lock-owner columns and console work: each test
here fails on main at ff71f7a.

- The owner hash includes the session's outer role (owners.rs), and the
  distlock.owner assign hook republishes it at once. When a transaction
  that did `SET LOCAL ROLE b; SET LOCAL distlock.owner = ...` rolls back,
  PostgreSQL 15 restores GUCs in name order: distlock.owner before role. The
  hook then hashes the restored owner with role b (still the outer role),
  and PUBLISHED_OWNER remembers (b, owner), so the entry keeps a node no
  other connection of the owner has until the next lock call. A real
  owner-level cycle through that connection is then never broken.
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg

from conftest import Db, connect, db, eventually  # noqa: F401 - db is a fixture


def test_control_without_the_rollback_the_cycle_is_broken(db: Db) -> None:
    """Passes: the same cycle without the rolled-back transaction."""
    assert "40P01" in owner_cycle(db, rollback=False).values()


def test_rollback_of_set_local_role_and_owner_leaves_the_owner_node_of_the_session_role(db: Db) -> None:
    outcomes = owner_cycle(db, rollback=True)
    assert "40P01" in outcomes.values(), (
        "owner p-owner holds rvf12-A on one connection and waits for rvf12-B on another, q-owner the other way "
        "round: a cycle pg_distlock breaks with 40P01 after deadlock_timeout. It was not broken "
        f"({outcomes}): the rollback restored distlock.owner before role (PG15 restores GUCs in name order), so "
        "the assign hook hashed p-owner with the rolled-back role and the holder's node differs from its owner's")


def owner_cycle(db: Db, rollback: bool) -> dict[str, str]:
    role_b = f"rvf12_{uuid.uuid4().hex[:8]}"
    db.admin.execute(f"CREATE ROLE {role_b}")
    conns: list[psycopg.Connection] = []

    def open_as(owner: str) -> psycopg.Connection:
        conn = connect(db.dsn)
        conns.append(conn)
        conn.execute("SELECT pg_catalog.set_config('distlock.owner', %s, false)", (owner,))
        return conn

    outcomes: dict[str, str] = {}

    def wait(conn: psycopg.Connection, key: str, label: str) -> None:
        try:
            got = conn.execute("SELECT distlock.lock(%s, '8 seconds')", (key,)).fetchone()[0]
            outcomes[label] = "granted" if got else "timed out"
        except psycopg.errors.DeadlockDetected:
            outcomes[label] = "40P01"
        except psycopg.Error as error:
            outcomes[label] = type(error).__name__

    try:
        p_hold = open_as("p-owner")
        p_hold.execute("SELECT distlock.lock('rvf12-A')")
        # A transaction under another role that names another owner, rolled
        # back: the session is role postgres, owner p-owner again.
        if rollback:
            p_hold.execute("BEGIN")
            p_hold.execute(f"SET LOCAL ROLE {role_b}")
            p_hold.execute("SET LOCAL distlock.owner = 'other'")
            p_hold.execute("ROLLBACK")
        assert p_hold.execute("SELECT current_user, current_setting('distlock.owner')").fetchone() == (
            "postgres", "p-owner")
        q_hold = open_as("q-owner")
        q_hold.execute("SELECT distlock.lock('rvf12-B')")
        threads = []
        for owner, key in (("p-owner", "rvf12-B"), ("q-owner", "rvf12-A")):
            conn = open_as(owner)
            conn.execute("SET deadlock_timeout = '200ms'")
            threads.append(threading.Thread(target=wait, args=(conn, key, owner)))
            threads[-1].start()
            time.sleep(0.3)
        for thread in threads:
            thread.join(timeout=20)
    finally:
        for conn in conns:
            conn.close()
        db.admin.execute(f"DROP ROLE IF EXISTS {role_b}")
    return outcomes
