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
import json
import math
import threading
from collections.abc import Callable
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


# The text CompactJSON writes for a str (non-ASCII kept): for code that writes a record's
# fixed parts itself (a plain job's payload, a history record) and must match it.
json_string = json.encoder.encode_basestring


class CompactJSON(threading.local):
    """Compact JSON text (``separators=(",", ":")``, non-ASCII kept), as
    ``json.JSONEncoder(...).encode`` makes it, byte for byte, but with CPython's C
    encoder built once per thread instead of on every call (building it is most of the
    cost of encoding a small object: a payload, a history record). Circular references
    raise ``ValueError("Circular reference detected")`` as ``json.dumps`` does: each thread
    has its own encoder, whose bookkeeping of the containers being encoded is cleared
    after an error. ``allow_nan=False``: NaN and infinities raise ``ValueError``.
    ``default``: as ``json.JSONEncoder``'s, called only for a value JSON has no form for
    (core/argcodec.py writes its tagged values so).
    """

    def __init__(
        self, *, allow_nan: bool = True, default: Callable[[Any], Any] | None = None
    ) -> None:
        base = json.JSONEncoder(
            separators=(",", ":"), ensure_ascii=False, allow_nan=allow_nan, default=default
        )
        make = getattr(json.encoder, "c_make_encoder", None)
        self._markers: dict[int, Any] = {}
        self._plain = base.encode
        self._chunks: Any = None
        if make is not None:
            self._chunks = make(
                self._markers,
                base.default,
                json_string,
                None,  # indent
                base.key_separator,
                base.item_separator,
                False,  # sort_keys
                False,  # skipkeys
                allow_nan,
            )

    def __call__(self, value: Any) -> str:
        chunks = self._chunks
        if chunks is None or isinstance(value, str):
            return self._plain(value)
        try:
            return "".join(chunks(value, 0))
        except BaseException:
            self._markers.clear()  # left half-filled by the error
            raise
