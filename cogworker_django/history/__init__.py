"""Run history: every run recorded cheaply (:mod:`.recorder`, the server middleware
and the in-memory buffer) and written in batches to a capped Redis stream
(:mod:`.writer`). Reading it is the api's (``api/history.py``); the digest's first
reading, which a page does not wait for, runs on this package's thread
(:mod:`.background`).

``COGWORKER["HISTORY"] = False`` (or ``HISTORY_MAX_RUNS = 0``) records nothing.
"""

from typing import Any

from .recorder import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    COMPONENT,
    FLUSH_BATCH,
    FLUSH_INTERVAL,
    MAX_BUFFERED,
    WRITE_CHUNK,
    Buffer,
    HistoryMiddleware,
    as_dict,
    capture,
    current_buffer,
    dumps,
    enabled,
    record_text,
)
from .writer import Writer, current_writer, flush, flush_safely


def __getattr__(name: str) -> Any:
    # The buffer is the runtime's (store/runtime.py): read when asked. (``history.writer``
    # is the module; the runtime's writer is ``current_writer()``.)
    if name == "buffer":
        return current_buffer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BACKOFF_FIRST",
    "BACKOFF_MAX",
    "COMPONENT",
    "FLUSH_BATCH",
    "FLUSH_INTERVAL",
    "MAX_BUFFERED",
    "WRITE_CHUNK",
    "Buffer",
    "HistoryMiddleware",
    "Writer",
    "as_dict",
    "buffer",
    "capture",
    "current_buffer",
    "current_writer",
    "dumps",
    "enabled",
    "flush",
    "flush_safely",
    "record_text",
    "writer",
]
