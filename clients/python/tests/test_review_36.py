"""Review 36 of the Python client (the changes ff4aa88..5fefeed): each test
is a break the review found, and fails on the commit reviewed."""

from __future__ import annotations

import logging
import time
from typing import Callable

import psycopg
import pytest

import pg_distlock
from conftest import PRIMARY, STANDBY, Db, dsn, eventually
from test_review_33 import (OLD_LIBRARY_REFUSALS, assert_nothing_campaigned, b_takes_over_after, group_held_by, interrupt_main_thread_when,
                            leader_state_locked, refuse_writes_of_old_library_sessions, zombie_campaign_waits)
from test_review_47 import worker_rides_out


# -- R36-1. A running worker or leader meets a REVOKE CONNECT maintenance drain


def refuse_every_session_as_old_library(db: Db) -> None:
    """Every write to leader_state refused in the library guard's words, as
    in a server with pg_distlock preloaded after an update, until its
    restart."""
    db.admin.execute("""
        CREATE OR REPLACE FUNCTION public.refuse_all() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = $m$this session runs pg_distlock's library 0.4.0, but this database's pg_distlock is 0.5.0$m$;
        END $$""")
    db.admin.execute("CREATE TRIGGER refuse_all BEFORE INSERT OR UPDATE OR DELETE ON distlock.leader_state"
                     " FOR EACH STATEMENT EXECUTE FUNCTION public.refuse_all()")


def drain_role(db: Db, role: str, seconds: float = 2.0) -> None:
    """The usual recipe to empty a database for maintenance (pg_repack, a
    restore, a schema change): REVOKE CONNECT from PUBLIC, end the sessions,
    work, GRANT CONNECT back. Meanwhile each reconnect is refused with
    'permission denied for database'."""
    db.admin.execute(f"REVOKE CONNECT ON DATABASE {db.name} FROM PUBLIC")
    try:
        db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
        time.sleep(seconds)
    finally:
        db.admin.execute(f"GRANT CONNECT ON DATABASE {db.name} TO PUBLIC")


def make_role(db: Db, role: str, *capabilities: str) -> str:
    db.admin.execute(f"DROP ROLE IF EXISTS {role}")
    db.admin.execute(f"CREATE ROLE {role} LOGIN")
    for capability in capabilities:
        db.admin.execute("SELECT distlock.grant_capability(%s, %s)", (role, capability))
    return dsn(PRIMARY, db.name, user=role)


def drop_role(db: Db, role: str) -> None:
    db.admin.execute(f"GRANT CONNECT ON DATABASE {db.name} TO PUBLIC")
    db.admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
    db.admin.execute(f"DROP OWNED BY {role}")
    db.admin.execute(f"DROP ROLE {role}")


def test_a_leader_rides_out_a_revoke_connect_maintenance_drain(db: Db) -> None:
    """7ef59e7 lists 'permission denied for database' among the refusals
    for good, whatever connected_before says: a leader that has led for
    days stops campaigning for good (Misconfigured) the first time a DBA
    drains the database, and never leads again once CONNECT is granted back.
    Before 7ef59e7 it was retried."""
    # The drain lasts longer than the term: the leader must campaign again.
    leader_rides_out(db, "rev36_leader", "rev36-drain", lambda role: drain_role(db, role, seconds=5.0))


def leader_rides_out(db: Db, role: str, group: str, drain: Callable[[str], None]) -> None:
    """A leader connected as `role` (made here, with the worker capability)
    leads `group`, `drain(role)` runs, and it leads again afterwards with no
    failure recorded."""
    conninfo = make_role(db, role, "worker")
    leader = pg_distlock.Leader(conninfo, group, node="a", ttl=3)
    try:
        leader.start()
        assert leader.wait_elected(timeout=10)
        drain(role)
        assert leader.wait_elected(timeout=15), "never led again after the drain"
        assert leader.failure is None, leader.failure
    finally:
        try:
            leader.close()
        except pg_distlock.DistlockError:
            pass
        drop_role(db, role)


def test_a_queue_worker_rides_out_a_revoke_connect_maintenance_drain(db: Db) -> None:
    role = "rev36_consumer"
    conninfo = make_role(db, role, "consumer")
    try:
        worker_rides_out(db, conninfo, lambda: drain_role(db, role))
    finally:
        drop_role(db, role)


@pytest.mark.parametrize("message", [
    'connection to server at "db.example" (10.0.0.5), port 5432 failed: FATAL:  permission denied for database "app"'
    "\nDETAIL:  User does not have CONNECT privilege.",
    "connection to server at \"db.example\" (10.0.0.5), port 5432 failed: GSSAPI encryption required but was "
    "impossible (possibly no credential cache, no server support, or using a local socket)",
], ids=["connect-revoked-for-maintenance", "kerberos-ticket-expired"])
def test_a_refusal_that_can_pass_is_unavailable_once_connections_succeeded(message: str) -> None:
    """After a first success, a refusal that an operator or a renewal undoes
    (CONNECT revoked while the database is drained; a Kerberos ticket that
    expired before k5start/kinit renewed it: libpq says 'possibly no
    credential cache') must be retried, as connected_before already does for
    a failed authentication. 7ef59e7 made both Misconfigured always."""
    from pg_distlock.connect_errors import connect_failure

    failure = connect_failure(psycopg.OperationalError(message), "host=db.example dbname=app gssencmode=require",
                              connected_before=True)
    assert not isinstance(failure, pg_distlock.Misconfigured), failure


# -- R36-2. The old library's refusal in a server whose lc_messages is not English

# PostgreSQL 15's own translations of 'could not find function "%s" in file "%s"'
# (postgres-15.mo), as a server with lc_messages = 'de_DE.UTF-8' or
# 'fr_FR.UTF-8' sends it; 42883 from load_external_function.
LOCALIZED_OLD_LIBRARY_REFUSALS = [
    ("42883", "konnte Funktion »distlock_library_guard« nicht in Datei "
              "»/usr/lib/postgresql/15/lib/pg_distlock.so« finden"),
    ("42883", "n'a pas pu trouver la fonction « distlock_library_guard » dans le fichier "
              "« /usr/lib/postgresql/15/lib/pg_distlock.so »"),
]


@pytest.mark.parametrize("refusal", LOCALIZED_OLD_LIBRARY_REFUSALS, ids=["de", "fr"])
def test_a_standby_node_refused_for_the_old_library_in_a_localized_server_takes_over(
        db: Db, refusal: tuple[str, str]) -> None:
    """errors.old_library matches '"distlock_library_guard"' with English
    double quotes; PostgreSQL translates that message (»…«, « … »), so in a
    German or French server the guard's refusal reads as NotInstalled ('run
    CREATE EXTENSION'): b stops campaigning for good (CANNOT_CAMPAIGN) and
    the refused session is kept."""
    refused = refuse_writes_of_old_library_sessions(db, "distlock.leader_state", refusal)
    b_takes_over_after(db, "rev36-upgrade-l10n", lambda: refused("pg_distlock:leader:b"))


# -- R36-5. A pooled session refused for the old library is kept in the pool


def test_a_client_call_refused_for_the_old_library_reconnects(db: Db) -> None:
    """ff4aa88 drops a refused session only when the source is a conninfo
    (Runtime._borrow's shared connection). A Client (and so every lock,
    leader, worker and admin it hands out) borrows from a psycopg_pool,
    which takes the refused session back and hands it out again: every
    write says Unavailable ('reconnect') until the pool's max_lifetime (an
    hour), and a standby leader made from a Client cannot take over for
    that long during an extension update."""
    refuse_writes_of_old_library_sessions(db, "distlock.queue_settings", OLD_LIBRARY_REFUSALS[1])
    with pg_distlock.Client(db.dsn, worker_id="rev36w") as client:
        admin = client.admin()
        assert admin.pause_queue("mail")
        assert int(db.value("WITH old AS (INSERT INTO public.old_library_backends SELECT pid FROM pg_stat_activity"
                            " WHERE application_name = 'pg_distlock:client:rev36w' RETURNING pid)"
                            " SELECT count(*) FROM old") or 0) >= 1
        with pytest.raises(pg_distlock.Unavailable) as raised:
            admin.resume_queue("mail")
        assert "reconnect" in str(raised.value)
        assert admin.resume_queue("mail"), "the next call got the refused session back from the pool"


# -- R36-3. Ctrl-C in start() of a leader whose source is a pool


def test_a_pool_leader_start_interrupted_by_ctrl_c_leaves_nothing_campaigning(db: Db) -> None:
    """eb39558's _abandon_start cancels the campaign's statement only on the
    connection a conninfo source shares (cancel_shared); with a pool (or a
    connection) as the source nothing is cancelled: start() sits out
    Join(timeout=every + 5) while Ctrl-C is pending, then raises, and the
    campaign still waiting in the server wins once the lock is free, so the
    group is held for a TTL by a node whose caller saw no start."""
    from psycopg_pool import ConnectionPool

    group = "rev36-pool-interrupted"
    elected: list[int] = []
    with ConnectionPool(f"{db.dsn} application_name=pg_distlock:leader:zombie", min_size=1, max_size=3,
                        kwargs={"autocommit": True}, open=True) as pool:
        zombie = pg_distlock.Leader(pool, group, node="zombie", ttl=3, on_elected=elected.append)
        with leader_state_locked(db):
            watcher = interrupt_main_thread_when(lambda: zombie_campaign_waits(db))
            began = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                zombie.start()
            interrupted_after = time.monotonic() - began
            watcher.join(10)
        assert_nothing_campaigned(db, group, elected)
        assert interrupted_after < 5, f"Ctrl-C took {interrupted_after:.1f} s to end start()"


# -- R36-4. A leader whose session is read-only says nothing, and keeps that session


def test_a_leader_on_a_standby_says_why_it_never_leads(db: Db, caplog: pytest.LogCaptureFixture) -> None:
    """25006 is Unavailable, which the campaign loop swallows without a word
    ('the next round reconnects'), and the runtime keeps the shared
    connection (it drops one only when broken or for the old library): a
    leader pointed at a standby (a multi-host conninfo without
    target_session_attrs=read-write, a VIP that still names the old
    primary) campaigns on the same read-only session forever, silently;
    start() returns and wait_elected() just times out."""
    group = "rev36-standby"
    eventually(lambda: db.admin.execute(
        "SELECT 1 FROM pg_catalog.pg_stat_replication WHERE replay_lsn >= pg_catalog.pg_current_wal_lsn()"
    ).fetchone(), what="the standby to have the database")
    leader = pg_distlock.Leader(dsn(STANDBY, db.name), group, node="ro", ttl=3)
    try:
        with caplog.at_level(logging.WARNING, logger="pg_distlock"):
            leader.start()
            assert not leader.wait_elected(timeout=3)
        assert not group_held_by(db, group, "ro")
        assert any(r.levelno >= logging.WARNING for r in caplog.records), \
            "a leader that can never lead on this session logged nothing"
    finally:
        try:
            leader.close()
        except pg_distlock.DistlockError:
            pass


def test_a_leader_refused_for_the_old_library_on_every_session_says_so(
        db: Db, caplog: pytest.LogCaptureFixture) -> None:
    """With pg_distlock in shared_preload_libraries (as docs recommend for
    its shared memory), every new session runs the old library until the
    server restarts: the guard refuses each campaign, the leader reconnects
    and is refused again, forever, and logs nothing (Unavailable is
    swallowed by the campaign loop): no node leads and nobody is told that
    the server needs its restart."""
    refuse_every_session_as_old_library(db)
    leader = pg_distlock.Leader(db.dsn, "rev36-preloaded", node="p", ttl=3)
    try:
        with caplog.at_level(logging.WARNING, logger="pg_distlock"):
            leader.start()
            assert not leader.wait_elected(timeout=3)
        assert any("library" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING), \
            "a leader refused by the library guard on every session logged nothing"
    finally:
        try:
            leader.close()
        except pg_distlock.DistlockError:
            pass
