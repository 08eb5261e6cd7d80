"""Review 38 of the Python client (742088c..0106e18): each test is a break
the review found and is expected to fail on 0106e18. NOT RUN: the review was
read-only (a CI run had the machine); see /tmp/review38.md."""

from __future__ import annotations

import logging
import time
from typing import Any

import psycopg
import pytest

import pg_distlock
from conftest import PRIMARY, Db, dsn
from test_review_33 import OLD_LIBRARY_REFUSALS, refuse_writes_of_old_library_sessions


def mark_sessions(db: Db, application_name: str) -> int:
    """Every session named `application_name` now is refused from here on."""
    return int(db.value("WITH old AS (INSERT INTO public.old_library_backends SELECT pid FROM pg_stat_activity"
                        " WHERE application_name = %s ON CONFLICT DO NOTHING RETURNING pid)"
                        " SELECT count(*) FROM old", application_name) or 0)


def toggle(admin: Any, i: int) -> None:
    """A write each call (pause and resume alternately: either fires the
    statement trigger)."""
    if i % 2 == 0:
        admin.pause_queue("mail")
    else:
        admin.resume_queue("mail")


# -- R38-1. Within 30 s of a drain, a refused session goes back to the pool


def test_a_session_refused_for_the_old_library_is_not_handed_out_again_without_drain(
        db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    """_borrow closes the refused session only when pool_drain.drain_due()
    says so (once per pool every 30 s), although pool_drain.py promises "one
    reconnect per failed call". With psycopg_pool 3.1 (pyproject allows
    >=3.1: no ConnectionPool.drain) only the first refused session is
    closed; every other session of the pool that loaded the old library
    goes back to the pool after its refusal and is handed out again, so
    about every other call fails for 30 s, and one more session is replaced
    per 30 s: a pool of 10 needs about 5 minutes after an extension update
    where it needed 10 calls. Here 3 old sessions, 10 calls: at most 3
    refusals are needed."""
    refuse_writes_of_old_library_sessions(db, "distlock.queue_settings", OLD_LIBRARY_REFUSALS[1])
    with pg_distlock.Client(db.dsn, min_size=3, max_size=3, worker_id="rev38a") as client:
        client.pool.wait()
        monkeypatch.setattr(client.pool, "drain", None, raising=False)  # as psycopg_pool 3.1
        admin = client.admin()
        assert mark_sessions(db, "pg_distlock:client:rev38a") == 3
        refusals = 0
        for i in range(10):
            try:
                toggle(admin, i)
            except pg_distlock.Unavailable:
                refusals += 1
    assert refusals <= 3, (f"{refusals} of 10 calls refused with 3 old sessions in the pool: a refused session is "
                           "closed only when a drain is due (once per 30 s), otherwise handed out again")


def test_a_pooled_session_reaching_a_read_only_server_is_replaced_even_within_30_s_of_a_drain(db: Db) -> None:
    """A failover behind one address (a VIP, a DNS name, a pooler):
    the first 25006 drains the pool, whose new sessions may reach the
    demoted server again before the address moves. Within the next 30 s
    such a session, refused with 25006, is neither closed nor drained:
    it goes back to the pool, and each call it serves fails until 30 s
    after the first drain, however long ago the address moved. Here the
    second session is refused once (as if the address moved right after):
    the call after it should run on a new session."""
    refuse_writes_of_old_library_sessions(db, "distlock.queue_settings",
                                          ("25006", "cannot execute INSERT in a read-only transaction"))
    with pg_distlock.Client(db.dsn, min_size=1, max_size=1, worker_id="rev38b") as client:
        client.pool.wait()
        admin = client.admin()
        assert admin.pause_queue("mail")
        assert mark_sessions(db, "pg_distlock:client:rev38b") == 1
        with pytest.raises(pg_distlock.Unavailable):
            admin.resume_queue("mail")  # drained: a new session
        assert admin.resume_queue("mail"), "the drained pool's new session serves"
        assert mark_sessions(db, "pg_distlock:client:rev38b") == 1  # that one reaches the read-only server too
        with pytest.raises(pg_distlock.Unavailable):
            admin.pause_queue("mail")
        try:
            admin.pause_queue("mail")
        except pg_distlock.Unavailable as exc:
            pytest.fail(f"the session refused with 25006 was handed out again within 30 s of the drain: {exc}")


# -- R38-2. A pool that never connected: a wrong dbname is no longer Misconfigured


def test_a_user_pool_that_never_connected_to_a_missing_database_is_misconfigured() -> None:
    """connect_failure now says Misconfigured only when connected_before is
    false, and pool_timeout_cause always passes True. A psycopg_pool given
    to Leader, Client, Queue... (no check_source) whose conninfo names a
    database that does not exist never connected once (the pool's stats
    say so: every attempt failed), yet its checkout timeout is Unavailable:
    loops retry forever. Before 0106e18 "does not exist" was Misconfigured
    whatever connected_before said (_REFUSED_FOR_GOOD); since, the rule is
    "Misconfigured only before a first success", which this pool never had.

    The fake stats were connections_num 0, connections_errors 4: a pool
    that failed has tried, and psycopg_pool's connections_num counts its
    attempts, failed ones included (review py47), so they are now 4 and 4:
    four attempts, all failed."""
    from pg_distlock._sync import pool_timeout_cause

    class NeverConnected:
        conninfo = dsn(PRIMARY, "rev38_no_such_database")
        kwargs: dict[str, Any] = {"autocommit": True}

        def get_stats(self) -> dict[str, int]:
            return {"connections_num": 4, "connections_errors": 4}

    failure = pool_timeout_cause(NeverConnected(), TimeoutError("couldn't get a connection after 30.00 sec"))  # type: ignore[arg-type]
    assert "does not exist" in str(failure), failure
    assert isinstance(failure, pg_distlock.Misconfigured), f"{type(failure).__name__}: {failure}"


# -- R38-3. Other campaign failures warn at every round


def test_a_campaign_failing_every_round_for_a_statement_timeout_is_not_reported_at_every_round(
        db: Db, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """UnavailableLog limits the WARNING of an Unavailable campaign to one
    every 5 minutes (R37-5), but every other failure that _campaigning now
    retries (statement or lock timeout while a DDL or VACUUM FULL holds
    leader_state, LeaseLost 55000 for a library newer than the database's
    SQL objects until ALTER EXTENSION UPDATE) logs a WARNING at every round:
    every ttl/3 s per node for as long as it lasts."""
    from pg_distlock._core import election

    def timed_out(self: Any) -> Any:
        if False:  # a generator, as _campaign is
            yield
        raise pg_distlock.Cancelled("canceling statement due to statement timeout", "57014")

    monkeypatch.setattr(election.LeaderLogic, "_campaign", timed_out)
    leader = pg_distlock.Leader(db.dsn, "rev38-timeouts", node="t", ttl=3, campaign_every=0.1)
    with caplog.at_level(logging.INFO, logger="pg_distlock"):
        try:
            leader.start()
            time.sleep(2)
        finally:
            try:
                leader.close()
            except pg_distlock.DistlockError:
                pass
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "campaign" in r.getMessage()]
    assert len(warnings) <= 1, f"{len(warnings)} campaign warnings in 2 s for one failure that lasts"


_ = psycopg  # the module's errors are what the client translates
