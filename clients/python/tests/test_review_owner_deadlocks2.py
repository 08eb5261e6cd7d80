"""Second review of owner deadlocks (branch owner-deadlocks at ac70150): each
test here fails on that commit.

The client names a lock's owner after the thread (`threading.get_ident()`)
or asyncio task (`id(task)`) that acquires it. Both are reused: a thread's
ident by the next thread once it has ended, a task's id by the next task
allocated once it has been freed. A lock acquired by a thread or task that
has ended since (a helper thread, a task of `asyncio.gather`, an executor)
keeps that owner while it is held, so the next thread or task that gets the
same ident/id and waits for that lock is taken for the lock's owner waiting
for itself on another connection: a false Deadlock, where it should simply
wait until the lock is released."""

from __future__ import annotations

import asyncio
import gc
import threading
from typing import Any

import pg_distlock
from pg_distlock import aio
from conftest import Db, PRIMARY, dsn

FAST = {"options": "'-c deadlock_timeout=100ms -c lock_timeout=20s'"}


def conninfo(db: Db) -> str:
    return dsn(PRIMARY, db.name, **FAST)


def test_a_thread_reusing_an_ended_threads_ident_is_not_the_owner_of_its_locks(db: Db) -> None:
    with pg_distlock.Client(conninfo(db), worker_id="reuse") as client:
        # The client's own threads first, so that they take no ident later.
        for i in range(3):
            with client.lock(f"rv2-warm-{i}"):
                pass
        held = client.lock("rv2-thread-lock")
        helper_ident: list[int] = []

        def acquire() -> None:  # e.g. a helper thread or an executor's worker
            helper_ident.append(threading.get_ident())
            held.acquire()

        helper = threading.Thread(target=acquire)
        helper.start()
        helper.join()
        outcome: dict[str, Any] = {}

        def candidate(n: int) -> None:
            # The first thread started since that gets the ended one's
            # ident (the next one, on glibc) asks for the lock.
            if threading.get_ident() != helper_ident[0]:
                return
            outcome["threads started"] = n + 1
            try:
                with client.lock("rv2-thread-lock", timeout=10):
                    outcome["result"] = "granted"
            except pg_distlock.Deadlock as exc:
                outcome["result"] = f"Deadlock: {exc}"

        for n in range(200):
            t = threading.Thread(target=candidate, args=(n,))
            t.start()
            t.join(timeout=1.0)  # a match waits for the lock (or fails at once)
            if outcome or t.is_alive():
                break
        held.release()
        t.join(timeout=15)
    assert outcome.get("result") == "granted", outcome


def test_a_task_reusing_a_freed_tasks_id_is_not_the_owner_of_its_locks(db: Db) -> None:
    async def run() -> dict[str, Any]:
        async with aio.Client(conninfo(db), worker_id="reuse") as client:
            for i in range(3):  # the client's own tasks first
                async with client.lock(f"rv2-warm-{i}"):
                    pass
            held = client.lock("rv2-task-lock")
            helper_id: list[int] = []

            async def acquire() -> None:
                helper_id.append(id(asyncio.current_task()))
                await held.acquire()

            # gather runs the acquisition in a task of its own, freed once done.
            await asyncio.gather(acquire())
            for _ in range(3):  # the loop drops its last callbacks of the helper
                await asyncio.sleep(0)
            gc.collect()
            outcome: dict[str, Any] = {}

            async def candidate(n: int) -> bool:
                # A busy service creates tasks all the time: the one that
                # reuses the helper's id asks for the lock.
                if id(asyncio.current_task()) != helper_id[0]:
                    return False
                outcome["tasks created"] = n + 1
                try:
                    async with client.lock("rv2-task-lock", timeout=10):
                        outcome["result"] = "granted"
                except pg_distlock.Deadlock as exc:
                    outcome["result"] = f"Deadlock: {exc}"
                return True

            # The holder lets go after a second (a timer, not a task: the
            # next task created must be free to reuse the helper's id).
            releasing: list[asyncio.Future[Any]] = []
            asyncio.get_running_loop().call_later(1.0, lambda: releasing.append(asyncio.ensure_future(held.release())))
            # Kept alive together, so that each takes memory of its own.
            await asyncio.gather(*[asyncio.create_task(candidate(n)) for n in range(2_000)])
            if releasing:
                await releasing[0]
            else:
                await asyncio.sleep(1.5)
                await held.release()
            return outcome

    outcome = asyncio.run(asyncio.wait_for(run(), timeout=30))
    assert outcome.get("result") == "granted", outcome
