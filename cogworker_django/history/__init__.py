"""Run history: every run recorded cheaply (:mod:`.recorder`, the server middleware
and the in-memory buffer) and written in batches to a capped Redis stream
(:mod:`.writer`). Reading it is the api's (``api/history.py``).

``COGWORKER["HISTORY"] = False`` (or ``HISTORY_MAX_RUNS = 0``) records nothing.
"""

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
    buffer,
    capture,
    dumps,
    enabled,
    record_text,
)
from .writer import Writer, flush, flush_safely, writer

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
    "dumps",
    "enabled",
    "flush",
    "flush_safely",
    "record_text",
    "writer",
]
