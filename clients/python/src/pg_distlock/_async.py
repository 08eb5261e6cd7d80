"""The asyncio driver: performs effects with psycopg.AsyncConnection and tasks."""

from __future__ import annotations

import asyncio
import inspect
import os
import signal
import sys
import time
import weakref
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterator, TypeVar, Union

import psycopg
from psycopg.rows import dict_row, tuple_row

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

from ._core import effects as fx
from ._core import features
from ._sync import (CHECK_CONNECT_TIMEOUT, PROBE_GRACE, busy_connecting, cause_not_known, chained, connect_kwargs,
                    name_database, own_copy, pool_busy, CONNECTED_POLL, CONNECTED_SETTLE, connected_by_stats,
                    pool_probe_args, probe_running, _served_pools,
                    raise_if_misconfigured, remember_probe, served, time_left)
from .bounded_connect import MIN_CONNECT_TIMEOUT, connect_within_async
from .connect_errors import connect_failure
from .idle_check import ended_while_idle
from .pool_drain import drain_due
from .errors import DistlockError, session_must_go, translate

T = TypeVar("T")

AsyncSource = Union[psycopg.AsyncConnection[Any], "AsyncConnectionPool[Any]", str]
"""An async connection (used as is), a psycopg_pool.AsyncConnectionPool, or a
conninfo string (see pg_distlock.Source)."""


class Held:
    def __init__(self, conn: psycopg.AsyncConnection[Any], owned: bool) -> None:
        self.conn = conn
        self.owned = owned


async def check_source(source: str, label: str) -> None:
    """_sync.check_source for asyncio."""
    try:
        async with await connect_within_async(source, connect_kwargs(source, label), CHECK_CONNECT_TIMEOUT) as conn:
            database, installed = (await run_statement(conn, fx.Execute(features.INSTALLED_SQL)))[0]
    except psycopg.Error as exc:
        raise_if_misconfigured(exc, source)
        return  # "not now": the pool connects once the server lets it
    if not installed:
        raise features.not_installed(database)


async def pool_timeout_cause(pool: AsyncConnectionPool[Any], timeout: Exception) -> DistlockError:
    """_sync.pool_timeout_cause for asyncio: the probe is a task of its own,
    which a caller that stops waiting (PROBE_GRACE, or its cancellation)
    does not cancel."""
    known = pool_probe_args(pool, timeout)
    if isinstance(known, DistlockError):
        return known
    conninfo, kwargs = known
    running = probe_running(pool, lambda: asyncio.ensure_future(probe_pool(pool, conninfo, kwargs, timeout)))
    done, _ = await asyncio.wait({running}, timeout=PROBE_GRACE)
    return own_copy(running.result()) if done else cause_not_known(timeout)  # other callers wait for it too


async def pool_connected_once(pool: AsyncConnectionPool[Any]) -> bool:
    """_sync.pool_connected_once for asyncio: the pool's own attempts run in
    this loop, so it waits with the loop's sleep."""
    if pool in _served_pools:
        return True
    deadline = time.monotonic() + CONNECTED_SETTLE
    while True:
        connected = connected_by_stats(pool)
        if connected is None:
            return True
        if not connected or time.monotonic() >= deadline:
            return connected
        await asyncio.sleep(CONNECTED_POLL)


async def probe_pool(pool: AsyncConnectionPool[Any], conninfo: str, kwargs: dict[str, Any],
                     timeout: Exception) -> DistlockError:
    """_sync.probe_pool for asyncio."""
    try:
        probe = await psycopg.AsyncConnection.connect(conninfo, **kwargs)
    except psycopg.Error as exc:
        connected = await pool_connected_once(pool)
        return remember_probe(pool, connect_failure(exc, conninfo, connected_before=connected))
    await probe.close()
    return remember_probe(pool, pool_busy(timeout))


async def run_statement(conn: psycopg.AsyncConnection[Any], effect: fx.Execute) -> list[Any]:
    try:
        if conn.autocommit or effect.in_caller_xact:
            return await fetch(conn, effect)
        async with conn.transaction():
            return await fetch(conn, effect)
    except psycopg.Error as exc:
        name_database(exc, conn)
        raise


async def fetch(conn: psycopg.AsyncConnection[Any], effect: fx.Execute) -> list[Any]:
    cur: psycopg.AsyncCursor[Any] = conn.cursor(row_factory=dict_row if effect.named else tuple_row)
    # Never prepared when read by name: a claim's `SELECT *` gains a column
    # with the update to 0.4.0, and a statement the application's own
    # connection prepared would then fail for good (0A000).
    await cur.execute(effect.sql, effect.params, prepare=False if effect.named else None)
    return await cur.fetchall() if cur.description else []


class Channel:
    def __init__(self) -> None:
        self.items: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, item: Any) -> None:
        self.items.put_nowait(item)

    def take(self) -> Any:
        try:
            return self.items.get_nowait()
        except asyncio.QueueEmpty:
            return None

    async def receive(self, timeout: float | None) -> Any:
        try:
            return self.items.get_nowait()
        except asyncio.QueueEmpty:
            pass
        getter = asyncio.ensure_future(self.items.get())
        done, _ = await asyncio.wait({getter}, timeout=timeout)
        if not done:
            # An item the getter took just as the time ran out is returned,
            # not dropped: cancel() leaves a finished getter's result.
            getter.cancel()
            try:
                return await getter
            except asyncio.CancelledError:
                return None
        return getter.result()


class Runtime:
    def __init__(self, source: AsyncSource) -> None:
        self.source = source
        self._shared: psycopg.AsyncConnection[Any] | None = None
        self._shared_lock = asyncio.Lock()
        self._features: weakref.WeakKeyDictionary[Any, features.Features] = weakref.WeakKeyDictionary()
        self.label = "pg_distlock"
        """The application_name of connections opened from a conninfo that names none."""
        self.connected_once = False
        """Whether a connection of the conninfo source ever succeeded: until
        then, a server that cannot be reached is a wrong conninfo."""

    def connect_kwargs(self) -> dict[str, Any]:
        return connect_kwargs(self.source, self.label)

    def new_flag(self) -> asyncio.Event:
        return asyncio.Event()

    def new_channel(self) -> Channel:
        return Channel()

    def cancel(self, session: fx.Session) -> None:
        """Cancels the statement running on `session`, from the event loop."""
        assert isinstance(session, Held)

        async def cancel() -> None:
            try:
                await session.conn.cancel_safe()
            except psycopg.Error:
                pass  # nothing to cancel, or the connection is gone: the loop sees it

        asyncio.ensure_future(cancel())

    def accept_callable(self, fn: Callable[..., Any] | None, what: str) -> None:
        """Plain and coroutine functions alike."""

    async def close(self) -> None:
        async with self._shared_lock:
            if self._shared is not None:
                await self._shared.close()
                self._shared = None

    async def run(self, gen: fx.Gen[T]) -> T:
        send: Any = None
        error: BaseException | None = None
        while True:
            try:
                effect = gen.send(send) if error is None else gen.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            try:
                send, error = await self._perform(effect), None
            except psycopg.Error as exc:
                send, error = None, translate(exc)
            except BaseException as exc:  # the logic's finally blocks must see it
                send, error = None, exc

    @asynccontextmanager
    async def _borrow(
        self, on: fx.Session | None, by: float | None = None,
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """_sync.Runtime._borrow for asyncio."""
        if isinstance(on, Held):
            yield on.conn
        elif isinstance(self.source, psycopg.AsyncConnection):
            yield self.source
        elif isinstance(self.source, str):
            conn = await self._shared_connection(time_left(by))
            try:
                yield conn
            except psycopg.Error as exc:
                # The next call opens a new connection: this one is lost, or
                # its session cannot serve (errors.session_must_go).
                if conn.broken or conn.closed or session_must_go(exc):
                    if self._shared is conn:
                        self._shared = None
                    await conn.close()
                raise
        else:
            from psycopg_pool import PoolTimeout

            given = False
            try:
                # _sync.Runtime._borrow: a connection the server ended while
                # it sat in the pool is closed and another taken.
                for looks_left in range(getattr(self.source, "max_size", 1), -1, -1):
                    async with self.source.connection(timeout=time_left(by)) as conn:
                        if looks_left and ended_while_idle(conn):
                            await conn.close()
                            continue
                        given = served(self.source, True)
                        try:
                            yield conn
                        except psycopg.Error as exc:
                            # Closed, the pool replaces it rather than hand it out again;
                            # its other sessions are as old (or reach the same read-only
                            # server): drained (psycopg_pool 3.2+), each is replaced,
                            # not more often than pool_drain.py says (new sessions may
                            # be refused too: a server that needs a restart).
                            if session_must_go(exc):
                                await conn.close()
                                drain = getattr(self.source, "drain", None)
                                if drain is not None and drain_due(self.source):
                                    await drain()
                            raise
                        return
            except PoolTimeout as exc:
                if given or by is None:
                    raise
                raise chained(await pool_timeout_cause(self.source, exc), exc)

    async def _shared_connection(self, timeout: float | None = None) -> psycopg.AsyncConnection[Any]:
        # _sync.Runtime._shared_connection. The wait for another task's
        # connect is bounded on Python 3.11+ (asyncio.timeout); 3.10's
        # wait_for can lose a lock acquired as it times out, so there it is not.
        # The connect gets what is left of the bound once the lock is had.
        by = None if timeout is None else time.monotonic() + timeout
        waited = self._shared_lock.locked()
        if timeout is not None and sys.version_info >= (3, 11):
            try:
                async with asyncio.timeout(timeout):
                    await self._shared_lock.acquire()
            except TimeoutError:
                raise busy_connecting(timeout) from None
        else:
            await self._shared_lock.acquire()
        try:
            # Not while another task's statement runs on it (checked and
            # closed with no await between).
            if self._shared is not None and not self._shared.closed and not self._shared.lock.locked():
                if ended_while_idle(self._shared):
                    await self._shared.close()
            if self._shared is None or self._shared.closed:
                left = time_left(by)
                if waited and left is not None and left < MIN_CONNECT_TIMEOUT:
                    raise busy_connecting(timeout or 0.0)
                self._shared = await self._connect(left)
            return self._shared
        finally:
            self._shared_lock.release()

    async def _connect(self, timeout: float | None = None) -> psycopg.AsyncConnection[Any]:
        """A connection of the conninfo source; Misconfigured when retrying
        cannot help (errors.connect_failure)."""
        assert isinstance(self.source, str)
        try:
            conn = await connect_within_async(self.source, self.connect_kwargs(), timeout)
        except psycopg.Error as exc:
            raise connect_failure(exc, self.source, self.connected_once) from exc
        self.connected_once = True
        return conn

    async def _perform(self, effect: fx.Effect) -> Any:
        if isinstance(effect, fx.Execute):
            async with self._borrow(effect.on, effect.checkout_by) as conn:
                return await run_statement(conn, effect)
        if isinstance(effect, fx.Sleep):
            if effect.until is None:
                await asyncio.sleep(effect.seconds)
                return False
            flag = effect.until
            assert isinstance(flag, asyncio.Event)
            try:
                await asyncio.wait_for(flag.wait(), effect.seconds)
            except asyncio.TimeoutError:
                return False
            return True
        if isinstance(effect, fx.Call):
            result = effect.fn(*effect.args)
            if not inspect.isawaitable(result):
                return result
            if effect.cancel is None:
                return await result
            assert isinstance(effect.cancel, asyncio.Event)
            return await cancellable(result, effect.cancel)
        if isinstance(effect, fx.Detect):
            async with self._borrow(effect.on, effect.checkout_by) as conn:
                found = None if effect.fresh else self._features.get(conn)
                if found is None:
                    found = features.parse(await run_statement(conn, fx.Execute(features.SQL)))
                    self._features[conn] = found
                return found
        if isinstance(effect, fx.Open):
            return await self._open(effect.timeout)
        if isinstance(effect, fx.Close):
            await self._close(effect.session, effect.discard)
            return None
        if isinstance(effect, fx.Probe):
            assert isinstance(effect.on, Held)
            return await probe(effect.on.conn)
        if isinstance(effect, fx.Receive):
            assert isinstance(effect.channel, Channel)
            return await effect.channel.receive(effect.timeout)
        if isinstance(effect, fx.Spawn):
            return asyncio.ensure_future(self.run(effect.gen))
        if isinstance(effect, fx.Join):
            task = effect.task
            assert isinstance(task, asyncio.Future)
            done, _ = await asyncio.wait({task}, timeout=effect.timeout)
            return task.result() if done else None
        raise DistlockError(f"unknown effect {effect!r}")

    async def _open(self, timeout: float | None) -> Held:
        if isinstance(self.source, psycopg.AsyncConnection):
            return Held(self.source, owned=False)
        if isinstance(self.source, str):
            return Held(await self._connect(timeout), owned=True)
        from psycopg_pool import PoolTimeout

        by = None if timeout is None else time.monotonic() + timeout
        try:
            # _sync.Runtime._open: one the server ended while it sat in the
            # pool is given back closed, and another taken.
            for looks_left in range(getattr(self.source, "max_size", 1), -1, -1):
                conn = await self.source.getconn(timeout=time_left(by))
                try:
                    ended = looks_left > 0 and ended_while_idle(conn)
                    if ended:
                        await conn.close()
                except BaseException:
                    await self.source.putconn(conn)  # a cancel here loses no connection
                    raise
                if not ended:
                    break
                await self.source.putconn(conn)
            return Held(served(self.source, conn), owned=True)
        except PoolTimeout as exc:
            raise chained(await pool_timeout_cause(self.source, exc), exc)

    async def _close(self, session: fx.Session, discard: bool) -> None:
        assert isinstance(session, Held)
        if not session.owned:
            return
        if isinstance(self.source, str) or discard:
            await session.conn.close()
        if not isinstance(self.source, str):
            await self.source.putconn(session.conn)  # type: ignore[union-attr]


async def cancellable(work: Awaitable[T], cancel: asyncio.Event) -> T:
    """Awaits `work`, cancelling it once `cancel` is set: HandlerCancelled
    then, unless the work caught the cancellation and returned."""
    task = asyncio.ensure_future(work)
    flagged = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait({task, flagged}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        flagged.cancel()
        if not task.done():
            task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        if task.cancelled() and cancel.is_set():
            raise fx.HandlerCancelled("stop(timeout) ran out before the handler returned") from None
        raise


async def probe(conn: psycopg.AsyncConnection[Any]) -> bool:
    if conn.closed or conn.broken:
        return False
    try:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            await run_statement(conn, fx.Execute("SELECT 1"))
        elif not conn.lock.locked():
            async with conn.lock:
                conn.pgconn.consume_input()
    except psycopg.OperationalError:
        return False
    except psycopg.Error:
        pass
    return not (conn.closed or conn.broken)


def resign_on_signals(resign: Callable[[], Any]) -> Callable[[], None]:
    """Until the returned function is called: SIGTERM or SIGINT first awaits
    `resign()`, then acts as it did before (the process ends, or
    KeyboardInterrupt)."""
    loop = asyncio.get_running_loop()
    installed: list[int] = []

    def restore() -> None:
        while installed:
            loop.remove_signal_handler(installed.pop())

    async def resign_then_resend(signum: int) -> None:
        await resign()
        os.kill(os.getpid(), signum)

    def on_signal(signum: int) -> None:
        restore()
        loop.create_task(resign_then_resend(signum))

    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, on_signal, sig)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):
            pass  # not the main thread's loop, or no signals here
    return restore


@contextmanager
def stop_on_signals(stop: Callable[[], None], enabled: bool) -> Iterator[None]:
    """SIGTERM and SIGINT call `stop` once; a second signal acts as it did before."""
    loop = asyncio.get_running_loop()
    installed: list[int] = []

    def restore() -> None:
        while installed:
            loop.remove_signal_handler(installed.pop())

    def on_signal() -> None:
        stop()
        restore()

    if enabled:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, on_signal)
            except (NotImplementedError, RuntimeError, ValueError):
                break  # not the main thread, or no signals on this platform
            installed.append(sig)
    try:
        yield
    finally:
        restore()
