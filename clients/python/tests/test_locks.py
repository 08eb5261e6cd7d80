from __future__ import annotations

import asyncio

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import pg_distlock
from pg_distlock import LockLost, LockTimeout, aio
from conftest import Db, connect, eventually


def holder_pid(db: Db, key: str) -> int:
    return int(eventually(lambda: db.value(
        "SELECT pid FROM distlock.advisory_locks WHERE key_name = %s AND granted", key), what="the lock in pg_locks"))


def test_session_lock_excludes_others_until_released(db: Db, name: str) -> None:
    with pg_distlock.lock(db.dsn, name, timeout=1) as held:
        with pytest.raises(LockTimeout):
            pg_distlock.lock(db.dsn, name, timeout=0.2).acquire()
        assert not held.lost.is_set()
    with pg_distlock.lock(db.dsn, name, timeout=0):
        pass


def test_shared_holders_coexist_and_keep_a_writer_out(db: Db, name: str) -> None:
    with pg_distlock.lock(db.dsn, name, shared=True), pg_distlock.lock(db.dsn, name, shared=True, timeout=0):
        with pytest.raises(LockTimeout):
            pg_distlock.lock(db.dsn, name, timeout=0.1).acquire()


def test_bigint_keys_are_pg_advisory_lock_keys(db: Db) -> None:
    with pg_distlock.lock(db.dsn, 4242):
        assert db.value("SELECT pg_try_advisory_lock(4242)") is False


def test_lost_is_set_and_callback_runs_when_the_holding_connection_dies(db: Db, name: str) -> None:
    reasons: list[str] = []
    with pg_distlock.lock(db.dsn, name, check_every=0.05, on_lost=reasons.append) as held:
        db.value("SELECT pg_terminate_backend(%s)", holder_pid(db, name))
        assert held.lost.wait(5), "the lock's loss was not noticed"
        with pytest.raises(LockLost):
            held.check()
    assert reasons and "died" in reasons[0]
    assert held.release() is False
    with pg_distlock.lock(db.dsn, name, timeout=0):
        pass


def test_pool_connection_goes_back_without_the_lock(db: Db, name: str) -> None:
    with ConnectionPool(db.dsn, min_size=1, max_size=1, kwargs={"autocommit": True}) as pool:
        with pg_distlock.lock(pool, name):
            pass
        with pool.connection() as conn:
            assert conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()").fetchone() == (0,)
        with pg_distlock.lock(db.dsn, name, timeout=0):
            pass


@pytest.mark.parametrize("via_pooler", [False, True], ids=["direct", "pgbouncer"])
def test_transaction_lock_ends_with_the_transaction(db: Db, name: str, via_pooler: bool) -> None:
    conn = psycopg.connect(db.pooled_dsn if via_pooler else db.dsn, prepare_threshold=None)
    try:
        with conn.transaction():
            with pg_distlock.lock(conn, name, timeout=1, transaction=True):
                with pytest.raises(LockTimeout):
                    pg_distlock.lock(db.dsn, name, timeout=0.1).acquire()
            # Leaving the block does not end a transaction lock; COMMIT does.
            assert db.value("SELECT count(*) FROM distlock.advisory_locks WHERE key_name = %s", name) == 1
        with pg_distlock.lock(db.dsn, name, timeout=0):
            pass
    finally:
        conn.close()


def test_transaction_lock_refuses_a_connection_outside_a_transaction(db: Db, name: str) -> None:
    with connect(db.dsn) as conn, pytest.raises(ValueError):
        pg_distlock.lock(conn, name, transaction=True).acquire()
    with pytest.raises(ValueError):
        pg_distlock.lock(db.dsn, name, transaction=True)


async def test_async_lock_has_the_same_shape(db: Db, name: str) -> None:
    async with aio.lock(db.dsn, name, check_every=0.05) as held:
        with pytest.raises(LockTimeout):
            await aio.lock(db.dsn, name, timeout=0.1).acquire()
        db.value("SELECT pg_terminate_backend(%s)", holder_pid(db, name))
        await asyncio.wait_for(held.lost.wait(), 5)
        with pytest.raises(LockLost):
            held.check()
    assert await held.release() is False
