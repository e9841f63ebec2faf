"""Run history: every run recorded cheaply, in a capped Redis stream.

Duties:
- :class:`HistoryMiddleware` (outermost server middleware, so it times everything)
  records each run: jid, job, queue, status ("success"/"failed"), started_at, duration,
  error_class, error_message, worker identity, periodic entry name;
- records go to this process's in-memory :data:`buffer` (a tuple each: the hot path
  does as little as it can), never one write per job (docs/internals.md);
  :class:`HistoryFlusher` writes them in batches to ``P:history``, one stream entry per
  run (field ``run``: the record as JSON) capped at ``HISTORY_MAX_RUNS`` (MAXLEN ~), by
  one script call per :data:`WRITE_CHUNK` runs, every :data:`FLUSH_INTERVAL` or sooner
  when :data:`FLUSH_BATCH` runs wait; the launcher flushes once more at shutdown;
- best-effort (rule 4): recording or writing never fails, slows or changes a job. While
  Redis is away the buffer keeps up to :data:`MAX_BUFFERED` runs; a deterministic error
  (the key holding the wrong type) drops that batch and backs off until the key guard
  has moved the key aside;
- reading (for the admin and the api) is in ``api/history.py``.

``COGWORKER["HISTORY"] = False`` (or ``HISTORY_MAX_RUNS = 0``) records nothing.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections import deque
from typing import Any

import redis

from . import conf, connection, errors, keys, payload, scripts
from .middleware import Reschedule

log = logging.getLogger("cogworker_django")

COMPONENT = "History"
# How often the flusher writes, and how many waiting runs make it write at once.
FLUSH_INTERVAL = 1.0
FLUSH_BATCH = 500
# Runs per script call: enough to amortise the round trip, few enough that one call holds
# Redis (and this process's GIL, while encoding) for well under a millisecond.
WRITE_CHUNK = 100
# Runs kept in memory while Redis is away (a few MB); beyond that the oldest are dropped.
MAX_BUFFERED = 10_000
# Error text kept per run: the full text is in the dead/retry payload already.
ERROR_MESSAGE_LIMIT = 1000
# A deterministic write failure (WRONGTYPE) backs off this long, doubling to the cap;
# the key guard moves the key aside within KEYGUARD_INTERVAL (60 s).
BACKOFF_FIRST = 5.0
BACKOFF_MAX = 60.0

# A run as buffered: (jid, job, queue, status, started_at, duration, error_class,
# error_message, periodic). The worker identity is added when it is written.
Run = tuple
# The record encoder; api/history.py matches fields written by exactly this encoder.
dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def enabled() -> bool:
    s = conf.get()
    return s.HISTORY and s.HISTORY_MAX_RUNS > 0


class Buffer:
    """This process's runs not yet written, oldest first."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._runs: deque[Run] = deque()
        self.dropped = 0
        self.wakeup = threading.Event()
        # Set by the worker at boot (extensions.build); a fallback for other callers.
        self.worker = f"{socket.gethostname().split('.')[0]}:{os.getpid()}"

    def add(self, run: Run) -> None:
        with self._lock:
            self._runs.append(run)
            if len(self._runs) > MAX_BUFFERED:
                self._runs.popleft()
                self.dropped += 1
            full = len(self._runs) >= FLUSH_BATCH
        if full and not self.wakeup.is_set():
            self.wakeup.set()

    def take(self, n: int) -> list[Run]:
        with self._lock:
            return [self._runs.popleft() for _ in range(min(n, len(self._runs)))]

    def put_back(self, runs: list[Run]) -> None:
        """Return runs a failed write did not store, in front (they are the oldest)."""
        with self._lock:
            self._runs.extendleft(reversed(runs))
            while len(self._runs) > MAX_BUFFERED:
                self._runs.popleft()
                self.dropped += 1

    def __len__(self) -> int:
        with self._lock:
            return len(self._runs)

    def clear(self) -> None:
        with self._lock:
            self._runs.clear()
            self.dropped = 0


buffer = Buffer()


def capture(
    job: dict[str, Any],
    queue: str,
    started_at: float,
    duration: float,
    exc: BaseException | None,
) -> Run:
    """One run as buffered: only what the record needs (never the payload or the
    exception itself, which would keep arguments and tracebacks alive in memory)."""
    periodic = job.get("periodic")
    if exc is None:
        status, error_class, message = "success", None, None
    else:
        status = "failed"
        error_class = payload.error_class(exc)
        message = errors.safe_str(exc, ERROR_MESSAGE_LIMIT)  # rule 7: never raises
    return (
        job.get("jid"),
        job.get("func"),
        queue,
        status,
        started_at,
        duration,
        error_class,
        message,
        periodic if isinstance(periodic, str) else None,
    )


def as_dict(run: Run, worker: str) -> dict[str, Any]:
    """The record of a buffered run, as stored (JSON) and as :func:`query` returns it."""
    jid, job, queue, status, started_at, duration, error_class, error_message, periodic = run
    return {
        "jid": jid,
        "job": job,
        "queue": queue,
        "status": status,
        "started_at": started_at,
        "duration": duration,
        "error_class": error_class,
        "error_message": error_message,
        "worker": worker,
        "periodic": periodic,
    }


class HistoryMiddleware:
    """Server middleware timing every run; only the job's own exception ever leaves it."""

    def __init__(self) -> None:
        self.enabled = enabled()

    def __call__(self, job: dict[str, Any], queue: str, run: Any) -> Any:
        if not self.enabled:
            return run()
        started_at = time.time()
        t0 = time.perf_counter()
        try:
            result = run()
        except Reschedule:
            raise  # not a run: the job goes back on the schedule without running
        except BaseException as exc:
            self._record(job, queue, started_at, time.perf_counter() - t0, exc)
            raise
        self._record(job, queue, started_at, time.perf_counter() - t0, None)
        return result

    @staticmethod
    def _record(job, queue, started_at, duration, exc) -> None:
        try:
            buffer.add(capture(job, queue, started_at, duration, exc))
        except Exception as err:  # noqa: BLE001 - rule 4: history never fails a job
            errors.report(COMPONENT, err, "a run was not recorded")


# Writing ------------------------------------------------------------------------------------


class _Writer:
    """Writes the buffer in chunks; remembers a deterministic failure's backoff."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one flush at a time (flusher thread, shutdown)
        self.retry_at = 0.0
        self.backoff = BACKOFF_FIRST

    def flush(self, conn: redis.Redis) -> int:
        """Write every buffered run; returns how many were written. Raises what the
        write raised (after putting back what Redis may not have stored)."""
        with self._lock:
            if time.monotonic() < self.retry_at:
                return 0
            written = 0
            while True:
                runs = buffer.take(WRITE_CHUNK)
                if not runs:
                    break
                written += self._write(conn, runs)
            self.backoff = BACKOFF_FIRST
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
        worker = buffer.worker
        records = [dumps(as_dict(run, worker)) for run in runs]
        try:
            scripts.run(
                "history_add", conn, [keys.history()], [conf.get().HISTORY_MAX_RUNS, *records]
            )
        except Exception as exc:
            if errors.is_unavailable(exc):
                # Kept for the next flush. (Had the reply been lost after the script ran,
                # these runs get recorded twice: better than not at all.)
                buffer.put_back(runs)
                raise
            # Deterministic (P:history of the wrong type): this batch is lost, never a job;
            # retrying every second can't help, so back off until the key guard moved it.
            self.retry_at = time.monotonic() + self.backoff
            delay, self.backoff = self.backoff, min(self.backoff * 2, BACKOFF_MAX)
            raise type(exc)(
                f"{len(runs)} run record(s) dropped, next write in {delay:.0f}s: "
                f"{errors.safe_str(exc)}"
            ) from None
        return len(runs)


writer = _Writer()


def flush(conn: redis.Redis | None = None) -> int:
    """Write the buffered runs now (raises on failure; see :func:`flush_safely`)."""
    return writer.flush(conn or connection.get_client())


def flush_safely(conn: redis.Redis | None = None) -> bool:
    """Best-effort :func:`flush`: an outage is logged once, never raised."""
    if not len(buffer) and not buffer.dropped:
        return True
    return errors.best_effort(COMPONENT, lambda: flush(conn))


class HistoryFlusher:
    """Worker component: a thread flushing the buffer every FLUSH_INTERVAL, or as soon
    as FLUSH_BATCH runs wait. The launcher flushes once more after the processors stop."""

    def __init__(self, worker: str) -> None:
        buffer.worker = worker
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="history", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        buffer.wakeup.set()
        if self._thread is not None:
            self._thread.join(5)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            buffer.wakeup.wait(FLUSH_INTERVAL)
            buffer.wakeup.clear()
            flush_safely()
