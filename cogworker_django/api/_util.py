"""Small helpers shared by the api modules: the client, bytes to text, epoch fields."""

from __future__ import annotations

import datetime as dt
from typing import Any

from ..store import codec, connection


def client() -> Any:
    # Any as connection.get_client: redis-py's replies are sync/async unions.
    return connection.get_client()


def text(value: Any) -> str:
    """Display text of a Redis reply (codec.shown); None shows as ""."""
    return "" if value is None else codec.shown(value)


# Reply bytes (a client with decode_responses gives str).
as_bytes = codec.wire


def epoch(value: Any) -> float | None:
    """A payload timestamp as a float, or None when it is missing or not a number (a
    hand-edited payload must not break a page)."""
    if not isinstance(value, (bytes, str, int, float)):
        return None  # (codec.number would read a Decimal, say: a payload holds none)
    return codec.number(value)


def as_datetime(value: Any) -> dt.datetime | None:
    """An aware UTC datetime for an epoch value (templates format it in the current zone)."""
    return codec.utc(epoch(value))
