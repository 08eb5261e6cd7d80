"""When a pool's sessions are drained because one could not serve
(errors.session_must_go): at most once per pool every DRAIN_EVERY seconds,
so that a refusal every new session repeats too (a server that needs a
restart after an update, a conninfo that reaches a standby) costs one
reconnect per failed call (the refused session is always closed) rather
than the whole pool each time."""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

DRAIN_EVERY = 30.0

_drained_at: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def drain_due(pool: Any) -> bool:
    """Whether to drain `pool` now; true at most once every DRAIN_EVERY
    seconds for one pool (from any thread)."""
    now = time.monotonic()
    with _lock:
        last = _drained_at.get(pool)
        if last is not None and now - last < DRAIN_EVERY:
            return False
        try:
            _drained_at[pool] = now
        except TypeError:
            return True  # a pool that cannot be weakly referenced: drained each time
        return True
