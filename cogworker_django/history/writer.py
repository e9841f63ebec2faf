"""Run history, the writing side: the buffered runs (history/recorder.py) written in
batches to ``P:history``, one stream entry per run, capped at ``HISTORY_MAX_RUNS``, by one
script call (lua/history_add.lua) per ``WRITE_CHUNK`` runs; the worker's History chore does it every
``FLUSH_INTERVAL`` (or sooner when ``FLUSH_BATCH`` runs wait), and the launcher once more
at shutdown. An outage keeps the runs for the next write; a deterministic error (the key
of the wrong type) drops that batch and backs off (errors.Backoff) until the key guard
has moved the key aside.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis

from .. import conf
from ..store import connection, errors, keys, runtime, scripts
from .recorder import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    COMPONENT,
    MAX_BUFFERED,
    WRITE_CHUNK,
    Run,
    current_buffer,
    record_text,
)

log = logging.getLogger("cogworker_django")


class Writer:
    """Writes the buffer in chunks; remembers a deterministic failure's backoff."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one flush at a time (flusher thread, shutdown)
        self.backoff = errors.Backoff(BACKOFF_FIRST, BACKOFF_MAX)

    def reset(self) -> None:
        """Forget any backoff (the next flush writes)."""
        self.backoff.succeeded(COMPONENT)

    def flush(self, conn: redis.Redis) -> int:
        """Write the buffered runs; returns how many were written. Raises what the
        write raised (after putting back what Redis may not have stored)."""
        with self._lock:
            if not self.backoff.ready(COMPONENT):
                return 0
            written = 0
            while True:
                runs = current_buffer().take(WRITE_CHUNK)
                if runs:
                    written += self._write(conn, runs)
                # A short chunk emptied the buffer: the runs recorded since wait for the
                # next flush. (Chasing them wrote a script call per few runs while jobs
                # finished as fast as a write took, not one per WRITE_CHUNK.)
                if len(runs) < WRITE_CHUNK:
                    break
            self.backoff.succeeded(COMPONENT)
            buffer = current_buffer()
            if buffer.dropped:
                dropped, buffer.dropped = buffer.dropped, 0
                log.warning(
                    "History: %d run(s) not recorded (more than %d waited while Redis was "
                    "unavailable)",
                    dropped,
                    MAX_BUFFERED,
                )
            return written

    def _write(self, conn: redis.Redis, runs: list[Run]) -> int:
        worker = current_buffer().worker
        # One argument for the whole batch, a record a line (JSON text holds no raw line
        # break): packing a hundred arguments cost redis-py more than the records did.
        records = "\n".join([record_text(run, worker) for run in runs]).encode(
            # A lone surrogate (an exception text decoded with surrogateescape, say) can't
            # go to Redis as UTF-8: "?" in its place, rather than the batch dropped.
            "utf-8",
            "replace",
        )
        try:
            scripts.run(
                "history_add", conn, [keys.history()], [conf.get().HISTORY_MAX_RUNS, records]
            )
        except Exception as exc:
            if errors.is_unavailable(exc):
                # Kept for the next flush. (Had the reply been lost after the script ran,
                # these runs get recorded twice: better than not at all.)
                current_buffer().put_back(runs)
                raise
            # Deterministic (P:history of the wrong type): this batch is lost, never a job;
            # retrying every second can't help, so back off until the key guard moved it.
            delay = self.backoff.failed(COMPONENT)
            raise type(exc)(
                f"{len(runs)} run record(s) dropped, next write in {delay:.0f}s: "
                f"{errors.safe_str(exc)}"
            ) from None
        return len(runs)


def current_writer() -> Writer:
    """This process's writer (its backoff): its runtime's (store/runtime.py)."""
    return runtime.current().of(Writer)


def __getattr__(name: str) -> Any:
    if name == "writer":  # history.writer: the runtime's, as it was a module global
        return current_writer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def flush(conn: redis.Redis | None = None) -> int:
    """Write the buffered runs now (raises on failure; see :func:`flush_safely`)."""
    return current_writer().flush(conn or connection.get_client())


def flush_safely(conn: redis.Redis | None = None) -> bool:
    """Best-effort :func:`flush`: an outage is logged once, never raised."""
    buffer = current_buffer()
    if not len(buffer) and not buffer.dropped:
        return True
    return errors.best_effort(COMPONENT, lambda: flush(conn))
