"""The blocking driver: performs effects with psycopg.Connection and threads."""

from __future__ import annotations

import concurrent.futures
import inspect
import logging
import os
import queue
import signal
import threading
import time
import weakref
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol, TypeVar, Union, cast

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.rows import dict_row, tuple_row

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

from ._core import effects as fx
from ._core import features
from .bounded_connect import MIN_CONNECT_TIMEOUT, connect_timeout, connect_within
from .connect_errors import connect_failure
from .idle_check import ended_while_idle
from .pool_drain import drain_due
from .errors import DistlockError, Misconfigured, Unavailable, session_must_go, translate

T = TypeVar("T")

log = logging.getLogger("pg_distlock.client")

Source = Union[psycopg.Connection[Any], "ConnectionPool[Any]", str]
"""A connection (used as is), a psycopg_pool.ConnectionPool, or a conninfo
string (the client opens autocommit connections itself and reopens them after
a failure, so a multi-host conninfo follows a failover)."""

# Transaction-pooling PgBouncer cannot keep a prepared statement across
# transactions, so connections the client opens never prepare.
OWN_CONNECTION = {"autocommit": True, "prepare_threshold": None}


def connect_kwargs(source: Any, label: str) -> dict[str, Any]:
    """How the client opens a connection from a conninfo: autocommit, never
    preparing, and named `label` unless the conninfo names it."""
    kwargs: dict[str, Any] = dict(OWN_CONNECTION)
    if isinstance(source, str) and "application_name" not in conninfo_to_dict(source):
        kwargs["application_name"] = label
    return kwargs


# How long a Client's first connection may take (unless its conninfo says).
CHECK_CONNECT_TIMEOUT = 10.0


def check_source(source: str, label: str) -> None:
    """Connects once with conninfo `source` and looks for the extension:
    Misconfigured or NotInstalled at once, rather than a pool's timeout
    after 30 s from the first call."""
    try:
        with connect_within(source, connect_kwargs(source, label), CHECK_CONNECT_TIMEOUT) as conn:
            database, installed = run_statement(conn, fx.Execute(features.INSTALLED_SQL))[0]
    except psycopg.Error as exc:
        raise_if_misconfigured(exc, source)
        return  # "not now": the pool connects once the server lets it
    if not installed:
        raise features.not_installed(database)


def raise_if_misconfigured(exc: psycopg.Error, source: str) -> None:
    """check_source could not connect: raises Misconfigured. A server
    that says "not now" (starting up, too many clients, no answer in time)
    is only logged: the pool keeps connecting in the background, so that a
    worker made from the client rides out a restart as one made from the
    conninfo does."""
    failure = connect_failure(exc, source, connected_before=False)
    if isinstance(failure, Misconfigured):
        raise failure from exc
    log.warning("pg_distlock: %s; the pool keeps trying in the background", failure)


# A pool's checkout timed out: what a connection of its own said, for a
# few seconds, so that a saturated pool is not probed past its max_size by
# every caller that waits for it.
PROBE_KEPT_FOR = 5.0
_probes: weakref.WeakKeyDictionary[Any, tuple[float, DistlockError]] = weakref.WeakKeyDictionary()
_probes_lock = threading.Lock()

# Pools that handed this client a connection once: their later refusals are a
# server that went away, whatever their statistics say (an exporter's
# pop_stats() zeroes them).
_served_pools: weakref.WeakSet[Any] = weakref.WeakSet()


def served(pool: Any, conn: T) -> T:
    """`conn`, a checkout of `pool` that succeeded, remembered
    (pool_connected_once)."""
    if pool not in _served_pools:
        _served_pools.add(pool)
    return conn


class Pending(Protocol):
    """A probe still connecting: a concurrent.futures.Future or an asyncio.Task."""

    def add_done_callback(self, fn: Callable[[Any], object], /) -> None: ...


Running = TypeVar("Running", bound=Pending)

# A probe still connecting, by pool: a caller whose checkout timed out waits
# for it too, rather than open one more connection of its own.
_probing: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

# How long a caller whose checkout timed out (its whole bound spent) waits
# for the probe: a server that refuses says why at once; one that does not
# answer would hold the caller for a connect_timeout per host, so the probe
# goes on in the background and its answer is remembered for the next callers.
PROBE_GRACE = 0.5


def probe_running(pool: Any, start: Callable[[], Running]) -> Running:
    """The probe of `pool` still connecting, else the one start() begins;
    forgotten once done."""
    with _probes_lock:
        if pool in _probing:
            return cast(Running, _probing[pool])
        started = _probing[pool] = start()
    started.add_done_callback(lambda _: forget_probe(pool, started))
    return started


def forget_probe(pool: Any, done: Pending) -> None:
    with _probes_lock:
        if _probing.get(pool) is done:
            del _probing[pool]


def cause_not_known(timeout: Exception) -> Unavailable:
    """The pool failed to connect lately and its probe has not said why yet."""
    return Unavailable(f"{timeout} (the pool failed to connect lately; why is not known yet: a connection of"
                       " its own is still trying, and later calls will say)")


def probed_lately(pool: Any) -> DistlockError | None:
    """What the last probe of `pool` found, if it was lately: the caller's
    own copy (own_copy)."""
    with _probes_lock:
        seen = _probes.get(pool)
    return own_copy(seen[1]) if seen is not None and time.monotonic() - seen[0] < PROBE_KEPT_FOR else None


E = TypeVar("E", bound=BaseException)


def own_copy(error: E) -> E:
    """A new instance of a probe's `error` (same class, args, attributes and
    __cause__) for one caller to raise: raising the probe's own object in
    every caller that waited for it, or in every call that found it
    remembered, links each caller's frames onto one __traceback__ (another
    thread's stack in a caller's error, a retry loop's traceback growing at
    each try) and chains each caller's timeout onto it."""
    copy = type(error).__new__(type(error), *error.args)
    copy.__dict__.update(error.__dict__)
    if error.__cause__ is not None:
        copy.__cause__ = error.__cause__
    return copy


def remember_probe(pool: Any, error: DistlockError) -> DistlockError:
    with _probes_lock:
        _probes[pool] = (time.monotonic(), error)
    return error


def pool_busy(timeout: Exception) -> Unavailable:
    return Unavailable(f"{timeout} (every connection of the pool is in use: raise max_size or hold fewer at once)")


# How long pool_connected_once watches a pool's statistics, and how often.
CONNECTED_SETTLE = 0.3
CONNECTED_POLL = 0.01


def connected_by_stats(pool: Any) -> bool | None:
    """What a pool's statistics say of its connections: psycopg_pool's
    connections_num counts attempts (counted before each tries, failed ones
    included) and connections_errors the failed ones, so a positive
    difference is connections that connected or attempts still under way
    (since the statistics were last popped); None: no statistics to tell."""
    try:
        stats: dict[str, int] = pool.get_stats()
    except Exception:
        return None
    return stats.get("connections_num", 0) - stats.get("connections_errors", 0) > 0


def pool_connected_once(pool: Any) -> bool:
    """Whether a pool ever opened a connection: until then a refusal is a
    wrong conninfo (connect_errors.connect_failure), as for a conninfo source.
    A pool that handed this client a connection did (served). Otherwise its
    statistics tell (connected_by_stats), once they have shown no attempt
    under way for CONNECTED_SETTLE: a pool that never connected, whose own
    worker was trying just then, looked connected, and its refusal was read
    as "not now" (seen in CI on a loaded machine)."""
    if pool in _served_pools:
        return True
    deadline = time.monotonic() + CONNECTED_SETTLE
    while True:
        connected = connected_by_stats(pool)
        if connected is None:
            return True  # no stats to tell: retried, as before a first success was told apart
        if not connected or time.monotonic() >= deadline:
            return connected
        time.sleep(CONNECTED_POLL)


def pool_probe_args(pool: Any, timeout: Exception) -> DistlockError | tuple[str, dict[str, Any]]:
    """What a pool's checkout timeout means, when that is known without a
    connection of its own: for a pool that never failed to connect, every
    connection in use (Unavailable, saying so); for one probed in the last
    few seconds, what that probe found. Otherwise the conninfo and keyword
    arguments to probe it with (both flavours' pool_timeout_cause)."""
    conninfo = pool.conninfo
    kwargs = {} if pool.kwargs is None else pool.kwargs  # ConnectionPool(conninfo) keeps None
    if not isinstance(conninfo, str) or not isinstance(kwargs, dict):
        return Unavailable(str(timeout))  # made at each connect: nothing to try it with
    if not pool.get_stats().get("connections_errors", 0):
        return pool_busy(timeout)  # it never failed to connect: all in use
    seen = probed_lately(pool)
    if seen is not None:
        return seen
    return conninfo, {**kwargs, **connect_timeout(conninfo, 2, kwargs)}


# The longest a bounded checkout or connect waits (seconds): a wait of 1e10 s
# overflowed the platform's time_t in the pool's condition wait.
MAX_CHECKOUT_WAIT = 86400.0


def time_left(by: float | None) -> float | None:
    """Seconds until `by` (time.monotonic(), fx.Execute.checkout_by) for a
    checkout or a connect, at least a millisecond (a pool refuses a checkout
    of 0 s even with a connection ready) and at most MAX_CHECKOUT_WAIT. None
    (the source's own limits) for None."""
    return None if by is None else min(max(by - time.monotonic(), 0.001), MAX_CHECKOUT_WAIT)


def busy_connecting(timeout: float) -> Unavailable:
    """A call bounded by `timeout` found another call of the same object
    still opening its connection to the server after that long (or failing
    to, with too little of the bound left to try again)."""
    return Unavailable(
        f"no connection within {timeout:g} s: another call of this object is still connecting to the server"
    )


def chained(error: DistlockError, timeout: Exception) -> DistlockError:
    """pool_timeout_cause's `error`, its cause the failed connect a probe
    found, else the pool's timeout."""
    if error.__cause__ is None:
        error.__cause__ = timeout
    return error


def pool_timeout_cause(pool: ConnectionPool[Any], timeout: Exception) -> DistlockError:
    """What a pool's checkout timeout means (pool_probe_args): when it can
    only be learned by trying, a connection of its own says why the pool
    cannot connect (the connect's error, chained: the pool's own message
    drops it), or that it was busy after all; if it has not said within
    PROBE_GRACE, that the cause is not known yet (cause_not_known). A
    probe's error is the caller's own copy (own_copy)."""
    known = pool_probe_args(pool, timeout)
    if isinstance(known, DistlockError):
        return known
    conninfo, kwargs = known
    running = probe_running(pool, lambda: in_thread(probe_pool, pool, conninfo, kwargs, timeout))
    try:
        return own_copy(running.result(PROBE_GRACE))  # other callers wait for it too
    except concurrent.futures.TimeoutError:
        return cause_not_known(timeout)


def probe_pool(pool: ConnectionPool[Any], conninfo: str, kwargs: dict[str, Any], timeout: Exception) -> DistlockError:
    """What a connection of the pool's own says (pool_timeout_cause), remembered."""
    try:
        probe = psycopg.connect(conninfo, **kwargs)
    except psycopg.Error as exc:
        return remember_probe(pool, connect_failure(exc, conninfo, connected_before=pool_connected_once(pool)))
    probe.close()
    return remember_probe(pool, pool_busy(timeout))


def in_thread(fn: Callable[..., T], *args: Any) -> concurrent.futures.Future[T]:
    """fn(*args) in a daemon thread of its own (a probe must not keep a
    process from exiting), its outcome in the future returned."""
    outcome: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            outcome.set_result(fn(*args))
        except BaseException as exc:  # handed to whoever waits for it
            outcome.set_exception(exc)

    threading.Thread(target=run, name="pg_distlock-probe", daemon=True).start()
    return outcome


class Held:
    """A connection kept across calls; `owned` when the client opened it."""

    def __init__(self, conn: psycopg.Connection[Any], owned: bool) -> None:
        self.conn = conn
        self.owned = owned


class Channel:
    def __init__(self) -> None:
        self.items: queue.SimpleQueue[Any] = queue.SimpleQueue()

    def put(self, item: Any) -> None:
        self.items.put(item)

    def take(self) -> Any:
        try:
            return self.items.get_nowait()
        except queue.Empty:
            return None


class Spawned:
    def __init__(self, runtime: Runtime, gen: fx.Gen[Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        name = f"pg_distlock-{getattr(gen, '__name__', 'task').strip('_')}:{runtime.label}"
        self.thread = threading.Thread(target=self._main, args=(runtime, gen), name=name, daemon=True)
        self.thread.start()

    def _main(self, runtime: Runtime, gen: fx.Gen[Any]) -> None:
        try:
            self.result = runtime.run(gen)
        except BaseException as exc:  # handed to whoever joins
            self.error = exc


def run_statement(conn: psycopg.Connection[Any], effect: fx.Execute) -> list[Any]:
    try:
        if conn.autocommit or effect.in_caller_xact:
            return fetch(conn, effect)
        with conn.transaction():
            return fetch(conn, effect)
    except psycopg.Error as exc:
        name_database(exc, conn)
        raise


def fetch(conn: psycopg.Connection[Any], effect: fx.Execute) -> list[Any]:
    cur: psycopg.Cursor[Any] = conn.cursor(row_factory=dict_row if effect.named else tuple_row)
    # Never prepared when read by name: a claim's `SELECT *` gains a column
    # with the update to 0.4.0, and a statement the application's own
    # connection prepared would then fail for good (0A000).
    cur.execute(effect.sql, effect.params, prepare=False if effect.named else None)
    return cur.fetchall() if cur.description else []


def name_database(exc: psycopg.Error, conn: Any) -> None:
    """Which database an error came from, for a message that says where to act."""
    try:
        exc.distlock_database = conn.info.dbname  # type: ignore[attr-defined]
    except Exception:
        pass


class Runtime:
    def __init__(self, source: Source) -> None:
        self.source = source
        self._shared: psycopg.Connection[Any] | None = None
        self._shared_lock = threading.Lock()
        self._borrowed: set[psycopg.Connection[Any]] = set()
        """Connections of a pool or connection source a statement runs on now
        (cancel_statements); a connection source's is not (the caller's own)."""
        self._features: weakref.WeakKeyDictionary[Any, features.Features] = weakref.WeakKeyDictionary()
        self.label = "pg_distlock"
        """The application_name of connections opened from a conninfo that names none."""
        self.connected_once = False
        """Whether a connection of the conninfo source ever succeeded: until
        then, a server that cannot be reached is a wrong conninfo."""

    def connect_kwargs(self) -> dict[str, Any]:
        return connect_kwargs(self.source, self.label)

    def new_flag(self) -> threading.Event:
        return threading.Event()

    def new_channel(self) -> Channel:
        return Channel()

    def cancel(self, session: fx.Session) -> None:
        """Cancels the statement running on `session` (from any thread)."""
        assert isinstance(session, Held)
        try:
            session.conn.cancel_safe()
        except psycopg.Error:
            pass  # nothing to cancel, or the connection is gone: the loop sees it

    def cancel_statements(self) -> None:
        """Cancels the statements this runtime runs now on its source's
        connections (the one opened for a conninfo source, those borrowed
        from a pool), from any thread."""
        shared = self._shared
        with self._shared_lock:
            running = list(self._borrowed)
        for conn in ([shared] if shared is not None else []) + running:
            self.cancel(Held(conn, owned=False))

    def accept_callable(self, fn: Callable[..., Any] | None, what: str) -> None:
        """A coroutine function would only be called, never run: refused."""
        if fn is not None and inspect.iscoroutinefunction(fn):
            raise TypeError(
                f"{what} {fn.__qualname__} is a coroutine function, which the blocking API cannot await: "
                "use pg_distlock.aio, or pass a plain function"
            )

    def close(self) -> None:
        """Closes the connection the client opened for a conninfo source."""
        with self._shared_lock:
            if self._shared is not None:
                self._shared.close()
                self._shared = None

    def run(self, gen: fx.Gen[T]) -> T:
        send: Any = None
        error: BaseException | None = None
        while True:
            try:
                effect = gen.send(send) if error is None else gen.throw(error)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            try:
                send, error = self._perform(effect), None
            except psycopg.Error as exc:
                send, error = None, translate(exc)
            except BaseException as exc:  # the logic's finally blocks must see it
                send, error = None, exc

    @contextmanager
    def _borrow(self, on: fx.Session | None, by: float | None = None) -> Iterator[psycopg.Connection[Any]]:
        """A connection to run a statement on; one of the source's must be
        had by `by` (fx.Execute.checkout_by), or Unavailable naming why not."""
        if isinstance(on, Held):
            yield on.conn
        elif isinstance(self.source, psycopg.Connection):
            # Not marked borrowed: the caller's connection may be running the
            # caller's own statement, which cancel_statements must not end.
            yield self.source
        elif isinstance(self.source, str):
            conn = self._shared_connection(time_left(by))
            try:
                yield conn
            except psycopg.Error as exc:
                # The next call opens a new connection: this one is lost, or
                # its session cannot serve (errors.session_must_go).
                if conn.broken or conn.closed or session_must_go(exc):
                    with self._shared_lock:
                        if self._shared is conn:
                            self._shared = None
                    conn.close()
                raise
        else:
            from psycopg_pool import PoolTimeout

            given = False
            try:
                # A connection the server ended while it sat in the pool is
                # closed (the pool replaces it) and another taken, so that a
                # restart or failover between calls fails none of them. As
                # many as the pool may hold, then one more as it comes.
                for looks_left in range(getattr(self.source, "max_size", 1), -1, -1):
                    with self.source.connection(timeout=time_left(by)) as conn:
                        if looks_left and ended_while_idle(conn):
                            conn.close()
                            continue
                        with self._borrowing(conn):
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
                                    conn.close()
                                    drain = getattr(self.source, "drain", None)
                                    if drain is not None and drain_due(self.source):
                                        drain()
                                raise
                        return
            except PoolTimeout as exc:
                if given or by is None:
                    raise
                raise chained(pool_timeout_cause(self.source, exc), exc)

    @contextmanager
    def _borrowing(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        with self._shared_lock:
            self._borrowed.add(conn)
        try:
            yield
        finally:
            with self._shared_lock:
                self._borrowed.discard(conn)

    def _shared_connection(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        # One connect at a time, which close() waits for; a call bounded by
        # `timeout` waits for another call's connect (unbounded: psycopg's
        # 130 s against a server that does not answer) no longer than that.
        # The connect gets what is left of the bound once the lock is had;
        # behind another call's connect that failed, less than a connect's
        # least (libpq's 2 s) is not tried.
        by = None if timeout is None else time.monotonic() + timeout
        acquired = waited = False
        try:
            acquired = self._shared_lock.acquire(blocking=False)
            if not acquired:
                waited = True
                acquired = self._shared_lock.acquire(timeout=-1 if timeout is None else timeout)
            if not acquired:
                raise busy_connecting(timeout or 0.0)
            if self._shared is not None and not self._shared.closed and self._shared.lock.acquire(blocking=False):
                # Not while another thread's statement runs on it.
                try:
                    if ended_while_idle(self._shared):
                        self._shared.close()
                finally:
                    self._shared.lock.release()
            if self._shared is None or self._shared.closed:
                left = time_left(by)
                if waited and left is not None and left < MIN_CONNECT_TIMEOUT:
                    raise busy_connecting(timeout or 0.0)
                self._shared = self._connect(left)
            return self._shared
        finally:
            if acquired:
                self._shared_lock.release()

    def _connect(self, timeout: float | None = None) -> psycopg.Connection[Any]:
        """A connection of the conninfo source; Misconfigured when retrying
        cannot help (errors.connect_failure)."""
        assert isinstance(self.source, str)
        try:
            conn = connect_within(self.source, self.connect_kwargs(), timeout)
        except psycopg.Error as exc:
            raise connect_failure(exc, self.source, self.connected_once) from exc
        self.connected_once = True
        return conn

    def _perform(self, effect: fx.Effect) -> Any:
        if isinstance(effect, fx.Execute):
            with self._borrow(effect.on, effect.checkout_by) as conn:
                return run_statement(conn, effect)
        if isinstance(effect, fx.Sleep):
            if effect.until is None:
                time.sleep(effect.seconds)
                return False
            return effect.until.wait(effect.seconds)  # type: ignore[attr-defined]
        if isinstance(effect, fx.Call):
            return effect.fn(*effect.args)
        if isinstance(effect, fx.Detect):
            with self._borrow(effect.on, effect.checkout_by) as conn:
                found = None if effect.fresh else self._features.get(conn)
                if found is None:
                    found = features.parse(run_statement(conn, fx.Execute(features.SQL)))
                    self._features[conn] = found
                return found
        if isinstance(effect, fx.Open):
            return self._open(effect.timeout)
        if isinstance(effect, fx.Close):
            self._close(effect.session, effect.discard)
            return None
        if isinstance(effect, fx.Probe):
            assert isinstance(effect.on, Held)
            return probe(effect.on.conn)
        if isinstance(effect, fx.Receive):
            assert isinstance(effect.channel, Channel)
            try:
                return effect.channel.items.get(timeout=effect.timeout)
            except queue.Empty:
                return None
        if isinstance(effect, fx.Spawn):
            return Spawned(self, effect.gen)
        if isinstance(effect, fx.Join):
            assert isinstance(effect.task, Spawned)
            effect.task.thread.join(effect.timeout)
            if effect.task.error is not None:
                raise effect.task.error
            return effect.task.result
        raise DistlockError(f"unknown effect {effect!r}")

    def _open(self, timeout: float | None) -> Held:
        if isinstance(self.source, psycopg.Connection):
            return Held(self.source, owned=False)
        if isinstance(self.source, str):
            return Held(self._connect(timeout), owned=True)
        from psycopg_pool import PoolTimeout

        by = None if timeout is None else time.monotonic() + timeout
        try:
            # As _borrow: one the server ended while it sat in the pool is
            # given back closed (the pool replaces it), and another taken.
            for looks_left in range(getattr(self.source, "max_size", 1), -1, -1):
                conn = self.source.getconn(timeout=time_left(by))
                try:
                    ended = looks_left > 0 and ended_while_idle(conn)
                    if ended:
                        conn.close()
                except BaseException:
                    self.source.putconn(conn)  # a Ctrl-C here loses no connection
                    raise
                if not ended:
                    break
                self.source.putconn(conn)
            return Held(served(self.source, conn), owned=True)
        except PoolTimeout as exc:
            raise chained(pool_timeout_cause(self.source, exc), exc)

    def _close(self, session: fx.Session, discard: bool) -> None:
        assert isinstance(session, Held)
        if not session.owned:
            return
        if isinstance(self.source, str) or discard:
            session.conn.close()
        if not isinstance(self.source, str):
            self.source.putconn(session.conn)  # type: ignore[union-attr]


def probe(conn: psycopg.Connection[Any]) -> bool:
    if conn.closed or conn.broken:
        return False
    try:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            run_statement(conn, fx.Execute("SELECT 1"))
        elif conn.lock.acquire(blocking=False):
            # The caller has a transaction open here: only read what the
            # server may have sent (a termination notice, end of stream).
            try:
                conn.pgconn.consume_input()
            finally:
                conn.lock.release()
    except psycopg.OperationalError:
        return False
    except psycopg.Error:
        pass
    return not (conn.closed or conn.broken)


def resign_on_signals(resign: Callable[[], None]) -> Callable[[], None]:
    """Until the returned function is called: SIGTERM or SIGINT first runs
    `resign`, then acts as it did before (the process ends, or
    KeyboardInterrupt). Only from the main thread; elsewhere nothing."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous: dict[int, Any] = {}

    def restore() -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # only the main thread may; a later signal resigns again, harmlessly
        for sig, old in previous.items():
            if signal.getsignal(sig) is on_signal:
                signal.signal(sig, old)

    def resign_then_resend(signum: int) -> None:
        resign()
        os.kill(os.getpid(), signum)

    def on_signal(signum: int, frame: Any) -> None:
        restore()
        # Not in the handler itself: it may have interrupted the main thread
        # inside a call that holds a lock the resignation needs.
        threading.Thread(target=resign_then_resend, args=(signum,), name="pg_distlock-resign", daemon=True).start()

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, on_signal)
    return restore


@contextmanager
def stop_on_signals(stop: Callable[[], None], enabled: bool) -> Iterator[None]:
    """SIGTERM and SIGINT call `stop` once; a second signal acts as it did before."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    def on_signal(signum: int, frame: Any) -> None:
        # From another thread: this handler may have interrupted the main
        # thread inside Event.wait, which holds the lock Event.set needs.
        threading.Thread(target=stop, daemon=True).start()
        restore()

    for sig in (signal.SIGTERM, signal.SIGINT):
        previous[sig] = signal.signal(sig, on_signal)
    try:
        yield
    finally:
        restore()
