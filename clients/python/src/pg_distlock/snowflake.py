"""Decoding pg_distlock snowflake IDs: 41 bits of milliseconds since the
epoch, 10 bits of worker id, 12 bits of sequence."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import NamedTuple

DEFAULT_EPOCH_MS = 1609459200000
"""distlock.snowflake_epoch's default, 2021-01-01 UTC."""


class Snowflake(NamedTuple):
    timestamp: datetime
    worker_id: int
    sequence: int


def timestamp_ms(snowflake_id: int, epoch_ms: int = DEFAULT_EPOCH_MS) -> int:
    """Milliseconds since 1970 when the ID was generated."""
    return (snowflake_id >> 22) + epoch_ms


def timestamp(snowflake_id: int, epoch_ms: int = DEFAULT_EPOCH_MS) -> datetime:
    ms = timestamp_ms(snowflake_id, epoch_ms)
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)


def worker_id(snowflake_id: int) -> int:
    return (snowflake_id >> 12) & 0x3FF


def sequence(snowflake_id: int) -> int:
    return snowflake_id & 0xFFF


def decode(snowflake_id: int, epoch_ms: int = DEFAULT_EPOCH_MS) -> Snowflake:
    if snowflake_id < 0:
        raise ValueError(f"not a snowflake ID: {snowflake_id}")
    return Snowflake(timestamp(snowflake_id, epoch_ms), worker_id(snowflake_id), sequence(snowflake_id))
