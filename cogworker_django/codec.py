"""Bytes and text between this package and Redis, in one place.

Three ways, each for its own kind of value:

- :func:`raw_text` / :func:`wire`: a raw job payload, which must round-trip byte for
  byte (ack, file and requeue send back exactly what Redis holds): bytes that are not
  UTF-8 are kept as surrogates by ``raw_text`` and restored by ``wire``;
- :func:`reply_text`: any other Redis reply (a name, a field, a counter), for logic;
- :func:`shown`: a value to show a person (the admin, a log line): undecodable bytes as
  ``\\xNN`` escapes, never an error.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any


def raw_text(value: Any) -> str:
    """A raw payload (or name) read from Redis as text; :func:`wire` gives its bytes back."""
    return value.decode("utf-8", errors="surrogateescape") if isinstance(value, bytes) else value


def wire(raw: str | bytes) -> bytes:
    """The exact bytes of a raw payload read with :func:`raw_text`."""
    return raw if isinstance(raw, bytes) else raw.encode("utf-8", errors="surrogateescape")


def reply_text(value: Any, errors: str = "replace") -> str:
    """A Redis reply as text; not for raw payloads (see :func:`raw_text`)."""
    return value.decode("utf-8", errors) if isinstance(value, bytes) else str(value)


def number(value: Any) -> float | None:
    """A finite number read from anywhere (a Redis reply, a payload field, what a user's
    hook returned), or None: missing, not a number, NaN, infinite, or a bool. Never
    raises: the failure paths that read numbers must not."""
    if value is None or isinstance(value, bool):
        return None
    try:
        result = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return result if math.isfinite(result) else None


def utc(seconds: float | None) -> dt.datetime | None:
    """An epoch as an aware UTC datetime (templates show it in the current zone), or None
    for one no datetime can hold."""
    if seconds is None:
        return None
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None


def shown(value: Any) -> str:
    """A value as text for a person to read; never raises on bytes."""
    return reply_text(value, "backslashreplace")
