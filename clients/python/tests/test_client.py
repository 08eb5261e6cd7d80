"""One Client per application: every primitive over one pool, named
connections and threads, and nothing left open."""

from __future__ import annotations

import threading

import pg_distlock
from pg_distlock import aio
from conftest import Db, eventually

POOL = 3
CYCLES = 1000


def backends(db: Db) -> int:
    return int(db.value(  # type: ignore[arg-type]
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"))


def all_gone(db: Db) -> None:
    """Backends end a moment after their client closed the connection."""
    eventually(lambda: backends(db) == 0, timeout=5, what="every backend of the test's clients to end")


def test_a_thousand_cycles_of_each_primitive_keep_to_the_pool(db: Db, name: str) -> None:
    with pg_distlock.Client(db.dsn, max_size=POOL, worker_id="w1") as client:
        for i in range(CYCLES):
            with client.lock(f"{name}-lock", timeout=5):
                pass
            with client.lease(f"{name}-lease", ttl=30):
                pass
            with client.semaphore(f"{name}-sem", 2, ttl=30):
                pass
            job = client.queue(worker_id="w1")
            job.enqueue(f"{name}-job", {"i": i})
            (taken,) = job.consume()
            assert job.complete(taken)
            assert client.rate_limiter(f"{name}-rl", 1000, 1000, 1).try_acquire().allowed
            assert client.throttle(f"{name}-t", 1000, 1000, 1).allowed
            client.generate_snowflake_id(1)
            if i % 10 == 0:
                # Leaders take a campaign and a resignation each: a tenth as many.
                with client.leader(f"{name}-g", "n", ttl=5) as leader:
                    assert leader.wait_elected(5)
            assert backends(db) <= POOL, f"cycle {i}: {backends(db)} backends for a pool of {POOL}"
        names = {r[0] for r in db.rows(
            "SELECT application_name FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")}
        assert names == {"pg_distlock:client:w1"}, names
    all_gone(db)


def test_close_stops_what_the_client_handed_out(db: Db, name: str) -> None:
    client = pg_distlock.Client(db.dsn, max_size=POOL)
    lease = client.lease(name, ttl=30)
    lease.acquire()
    leader = client.leader(f"{name}-g", "n", ttl=30)
    leader.start()
    assert leader.wait_elected(5)
    client.close()
    assert db.value("SELECT count(*) FROM distlock.leases WHERE name = %s AND is_held", name) == 0
    assert db.value("SELECT count(*) FROM distlock.leaders WHERE group_name = %s AND is_current", f"{name}-g") == 0
    all_gone(db)


def test_objects_from_a_conninfo_close_their_connections_and_are_named(db: Db, name: str) -> None:
    for _ in range(40):
        with pg_distlock.Lease(db.dsn, name, "owner-x", ttl=30) as lease:
            assert db.value(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pg_distlock:lease:owner-x'") == 1
            assert any(t.name.startswith("pg_distlock-renewing:pg_distlock:lease:owner-x") for t in threading.enumerate())
            assert lease.token is not None
    # Closed on leaving each block, not left to the garbage collector.
    all_gone(db)


async def test_async_client(db: Db, name: str) -> None:
    async with aio.Client(db.dsn, max_size=POOL, worker_id="w2") as client:
        for i in range(100):
            async with client.lease(f"{name}-lease", ttl=30):
                pass
            queue = client.queue()
            await queue.enqueue(f"{name}-job", {"i": i})
            (job,) = await queue.consume()
            assert await queue.complete(job)
            assert (await client.throttle(f"{name}-t", 1000, 1000, 1)).allowed
            assert backends(db) <= POOL
        async with client.leader(f"{name}-g", "n", ttl=5) as leader:
            assert await leader.wait_elected(5)
    all_gone(db)
